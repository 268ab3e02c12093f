"""``Peer.post_many`` on the in-memory test double: a list to one recipient, in order, each id
once, through the lean path (recipient down) and the general one (recipient up); a message
that fails its checks sends nothing of its chunk. ``Peer.post``'s lean path refuses what the
general path refuses, with the same errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tidemark.peer_client import MessageContext, message
from tidemark.peer_client.exceptions import (
    OversizedMessageError,
    PayloadError,
    PeerUnreachableError,
)
from tidemark.peer_client.sending import POST_CHUNK
from tidemark.peer_client.testing import TestBus


@message("tests.post_many.Item")
@dataclass
class Item:
    n: int
    blob: bytes = b""


@message("tests.post_many.Beep", transient=True)
@dataclass
class Beep:
    n: int


def _handled(peer) -> list[tuple[int, str, bool]]:  # noqa: ANN001
    seen: list[tuple[int, str, bool]] = []

    @peer.handler(Item)
    def handle(msg: Item, ctx: MessageContext) -> None:
        seen.append((msg.n, ctx.message_id, ctx.replay))
    return seen


def test_a_list_to_a_down_peer_is_logged_in_order_and_replayed_once() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen = _handled(b)
    b.stop()
    count = POST_CHUNK * 2 + 7  # three chunks
    ids = a.post_many("B", [Item(i) for i in range(count)])
    assert a.flush(5)
    assert len(set(ids)) == count
    assert [s["message_id"] for s in bus.sends("B")] == ids
    assert a._core.flight.in_flight == 0
    bus.restart("B")
    assert [(n, mid) for n, mid, _ in seen] == list(zip(range(count), ids, strict=True))
    assert all(replay for _, _, replay in seen) and not bus.unacked("B")


def test_a_list_to_an_up_peer_is_delivered_in_order() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen = _handled(b)
    ids = a.post_many("B", [Item(i) for i in range(50)])
    assert a.flush(5)
    assert [(n, mid) for n, mid, _ in seen] == list(zip(range(50), ids, strict=True))
    assert not bus.unacked("B")


def test_a_message_failing_its_checks_sends_nothing_of_its_chunk() -> None:
    bus = TestBus(max_message_bytes=1000)
    a, b = bus.peer("A"), bus.peer("B")
    b.stop()
    with pytest.raises(OversizedMessageError, match="exceeds max_message_bytes=1000"):
        a.post_many("B", [Item(0), Item(1, b"x" * 2000), Item(2)])
    assert bus.sends("B") == [] and a._core.flight.in_flight == 0
    with pytest.raises(PeerUnreachableError, match="can only be delivered directly"):
        a.post_many("B", [Beep(0)])
    ids = a.post_many("B", [Item(3)])
    assert [s["message_id"] for s in bus.sends("B")] == ids


def test_a_post_to_a_down_peer_refuses_what_a_send_refuses() -> None:
    """The lean path (recipient down) encodes the whole Send in one call: a payload that
    does not encode, a payload too big and a Send too big raise as ``send`` raises, and
    nothing is appended or left in flight."""
    bus = TestBus(max_message_bytes=1000)
    a, b = bus.peer("A"), bus.peer("B")
    b.stop()
    with pytest.raises(PayloadError, match="cannot encode"):
        a.post("B", Item("not an int"))  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="cannot encode"):
        a.post_many("B", [Item(0), Item("x")])  # type: ignore[arg-type]
    with pytest.raises(OversizedMessageError, match="payload of .* exceeds"):
        a.post("B", Item(1, b"x" * 2000))
    with pytest.raises(OversizedMessageError, match="Send of .* exceeds"):
        a.post("B", Item(2, b"x" * 960))  # the payload fits, the Send does not
    assert bus.sends("B") == [] and a._core.flight.in_flight == 0
    mid = a.post("B", Item(3))
    assert [s["message_id"] for s in bus.sends("B")] == [mid]
    assert a.stats["logged"] == 1
