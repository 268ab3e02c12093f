"""What every kind of peer offers, as :class:`typing.Protocol` s: an application annotates "a
peer" once and runs with :class:`~tidemark.peer_client.Peer` (on Kafka, or in its tests on
the in-memory :class:`tidemark.peer_client.testing.TestBus`) or with
:class:`~tidemark.peer_client.AsyncPeer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tidemark.peer_client.context import Phase
from tidemark.peer_client.delivery import Delivery

__all__ = ["PeerLike", "SyncPeer"]


@runtime_checkable
class PeerLike(Protocol):
    """Identity, phase and handler registration: ``Peer`` (real or on the test bus) and
    ``AsyncPeer``."""

    @property
    def peer_id(self) -> str:
        """The peer's id."""

    @property
    def incarnation(self) -> str:
        """This run's incarnation id."""

    @property
    def phase(self) -> Phase:
        """Where the peer is in its life (starting, replaying, normal, stopped...)."""

    def handler(self, fn_or_cls: Any = None, *, backoff: Sequence[float] = ()) -> Any:
        """Register a handler (a decorator); the message type comes from the annotation."""

    def batch_handler(self, fn_or_cls: Any = None, *, backoff: Sequence[float] = ()) -> Any:
        """Register a batch handler (a list of messages per call)."""


@runtime_checkable
class SyncPeer(PeerLike, Protocol):
    """The blocking API: ``Peer``, on Kafka or on the test bus."""

    def stop(self) -> None:
        """Stop: finish the handlers running, flush acks, deregister."""

    def send(self, to: str, message: Any, durability: str = "log") -> str:
        """Send to ``to`` and wait for ``durability``; the message id."""

    def send_nowait(self, to: str, message: Any, durability: str = "log") -> Delivery:
        """Send to ``to``; a handle that completes at ``durability``."""

    def post(self, to: str, message: Any, durability: str = "log") -> str:
        """Send to ``to`` and forget (``flush`` waits); the message id."""

    def post_many(self, to: str, messages: Iterable[Any], durability: str = "log"
                  ) -> list[str]:
        """:meth:`post` each of ``messages`` to ``to``, in order; their ids."""

    def publish(self, message: Any, durability: str = "log") -> str:
        """Send to every subscriber and wait for ``durability``; the message id."""

    def publish_nowait(self, message: Any, durability: str = "log") -> Delivery:
        """Send to every subscriber; a handle that completes at ``durability``."""


if TYPE_CHECKING:  # mypy checks that both kinds of peer satisfy the protocols
    from tidemark.peer_client.aio import AsyncPeer
    from tidemark.peer_client.peer import Peer

    def _conforms(peer: Peer, aio: AsyncPeer) -> None:
        blocking: list[SyncPeer] = [peer]
        every: list[PeerLike] = [peer, aio]
        del blocking, every
