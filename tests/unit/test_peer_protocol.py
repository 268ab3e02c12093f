"""An application annotates "a peer" once: the test double's peers are ``Peer`` s (over
in-memory ports) and satisfy the same protocols (mypy checks ``Peer`` and ``AsyncPeer``
against them in peer_client/protocol.py)."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.peer_client import MessageContext, Peer, PeerLike, SyncPeer, message
from tidemark.peer_client.testing import TestBus


@message("proto.Ping")
@dataclass
class Ping:
    n: int


def greet(peer: SyncPeer, to: str) -> str:
    """Application code written against the protocol."""
    return peer.send(to, Ping(1))


def test_the_test_double_is_a_sync_peer_and_application_code_runs_on_it() -> None:
    bus = TestBus()
    a, b = bus.peer("a"), bus.peer("b")
    got: list[int] = []

    @b.handler
    def on_ping(p: Ping, ctx: MessageContext) -> None:
        got.append(p.n)

    assert isinstance(a, Peer) and isinstance(a, SyncPeer) and isinstance(b, PeerLike)
    assert greet(a, "b") and got == [1]
    assert not isinstance(object(), PeerLike)
