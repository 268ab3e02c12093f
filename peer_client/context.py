"""What a handler learns about the message it handles, and the peer's phases."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn

from tidemark.peer_client.exceptions import Nak, Term

if TYPE_CHECKING:
    from tidemark.peer_client.records import Envelope

__all__ = ["Phase", "RUNNING", "MessageContext", "BatchContext"]


class Phase(enum.Enum):
    """Where a peer is in its life. Replay (the next issue) adds REPLAY and HANDOVER:
    live messages arriving during REPLAY are held back and dispatched after it."""

    CREATED = "created"
    STARTING = "starting"
    REPLAY = "replay"
    HANDOVER = "handover"
    NORMAL = "normal"
    STOPPING = "stopping"
    STOPPED = "stopped"


#: Phases in which the peer accepts messages and sends.
RUNNING = (Phase.STARTING, Phase.REPLAY, Phase.HANDOVER, Phase.NORMAL)


class MessageContext:
    """Passed to a handler beside the message. Read-only: its fields are read from the
    arriving message when asked for (building a frozen dataclass per message cost the
    replay about 0.5 µs of the 10 it spends per message)."""

    __slots__ = ("_env", "_peer_id")
    _env: Envelope
    _peer_id: str

    def __init__(self, env: "Envelope", peer_id: str) -> None:
        object.__setattr__(self, "_env", env)
        object.__setattr__(self, "_peer_id", peer_id)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"MessageContext is read-only (cannot set {name!r})")

    @property
    def message_id(self) -> str:
        """The message's id (the key of dedup and acks)."""
        return self._env.message_id

    @property
    def sender(self) -> str:
        """The peer that sent it."""
        return self._env.sender

    @property
    def message_type(self) -> str:
        """Its wire type name."""
        return self._env.message_type

    @property
    def delivery_count(self) -> int:
        """Earlier failed deliveries of this message (0 the first time)."""
        return self._env.delivery_count

    @property
    def replay(self) -> bool:
        """True when it came from replay, False when delivered live."""
        return self._env.replay

    @property
    def timestamp_ms(self) -> int:
        """When the sender sent it."""
        return self._env.timestamp_ms

    @property
    def peer_id(self) -> str:
        """The peer handling it."""
        return self._peer_id

    @property
    def persistent(self) -> bool:
        """Whether it is acked (persistent) or direct only (transient)."""
        return self._env.persistent

    @property
    def live(self) -> bool:
        """Delivered directly by its sender (not replayed)."""
        return not self._env.replay

    def nak(self, delay: float | None = None) -> NoReturn:
        """Fail this delivery and deliver the message again in this peer after ``delay``
        seconds (None: the handler's ``backoff`` for this delivery, else at once). Raises
        :class:`~tidemark.peer_client.Nak`: nothing after it in the handler runs."""
        raise Nak(delay)

    def term(self, reason: str = "terminated by the handler") -> NoReturn:
        """Dead-letter this message at once, with ``reason``. Raises
        :class:`~tidemark.peer_client.Term`: nothing after it in the handler runs."""
        raise Term(reason)

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, f) for f in _FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageContext):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "MessageContext(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _FIELDS) + ")"


_FIELDS = ("message_id", "sender", "message_type", "delivery_count", "replay", "timestamp_ms",
           "peer_id", "persistent")


class BatchContext:
    """Passed to a batch handler beside its list of messages: the :class:`MessageContext`
    of each, by index (``ctx[i]``, ``for c in ctx``), built only when asked for."""

    __slots__ = ("_envs", "_peer_id")

    def __init__(self, envs: "Sequence[Envelope]", peer_id: str) -> None:
        self._envs = envs
        self._peer_id = peer_id

    def __len__(self) -> int:
        return len(self._envs)

    def __getitem__(self, index: int) -> MessageContext:
        return MessageContext(self._envs[index], self._peer_id)

    def __iter__(self) -> Iterator[MessageContext]:
        peer_id = self._peer_id
        return (MessageContext(env, peer_id) for env in self._envs)

    @property
    def message_ids(self) -> list[str]:
        """The messages' ids, in batch order."""
        return [env.message_id for env in self._envs]

    @property
    def replay(self) -> bool:
        """True when every message of the batch came from replay."""
        return all(env.replay for env in self._envs)

    @property
    def peer_id(self) -> str:
        """The peer handling them."""
        return self._peer_id

    def __repr__(self) -> str:
        return f"BatchContext({len(self._envs)} messages, peer_id={self._peer_id!r})"
