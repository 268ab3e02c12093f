"""A direct call the sender gave up on (it timed out) may still reach the peer later. The
sender has logged those messages unmarked by then, and sent newer ones directly: the late
batch must not be handled after them. The peer refuses a batch of a sender incarnation that
starts at or below a sequence number it already accepted (``stale``); its messages keep
their place through the log. Real ``PeerCore.receive`` on the public test double."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.peer_client import MessageContext, message, message_type_of
from tidemark.peer_client.direct_order import sequence_of
from tidemark.peer_client.testing import TestBus


@message("tests.late.Note")
@dataclass
class Note:
    n: int


def _batch(inc: str, ns: range) -> dict:
    return {"sender": "A", "sender_incarnation": inc, "recipient": "B", "environment": "test",
            "sender_nonce": "", "log_floor": -1, "messages": [
                {"message_id": f"{inc}-{n}", "message_type": "tests.late.Note",
                 "payload": message_type_of(Note).serializer.encode(Note(n)),
                 "timestamp_ms": 1, "persistent": True} for n in ns]}


def test_a_late_batch_is_refused_and_a_new_incarnation_starts_afresh() -> None:
    bus = TestBus(auto_run=False)
    b = bus.peer("B")
    seen: list[int] = []

    @b.handler
    def on(msg: Note, ctx: MessageContext) -> None:
        seen.append(msg.n)

    receive = b._core.receive
    assert receive(_batch("a1", range(5, 7)))["accepted"] == 2
    late = receive(_batch("a1", range(3, 5)))          # the call A gave up on, arriving now
    assert late["error_kind"] == "stale" and late["accepted"] == 0
    assert receive(_batch("a1", range(6, 8)))["error_kind"] == "stale"  # overlaps: late too
    assert receive(_batch("a1", range(7, 9)))["accepted"] == 2
    assert receive(_batch("a2", range(1, 2)))["accepted"] == 1  # A restarted: its own count
    bus.run_until_idle()
    assert seen == [5, 6, 7, 8, 1]
    assert b._core.stats["stale_direct"] == 4


def test_sequence_numbers_of_ids() -> None:
    assert sequence_of("594de1c62a649db7-20373") == 20373
    assert sequence_of("no-number-x") is None and sequence_of("plain") is None
