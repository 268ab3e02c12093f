"""A sender on the fast path serves delivery callbacks itself every 512 appends and counts it
in ``Outbox.served``, which the housekeeping thread reads to stay out of its way."""

from __future__ import annotations

from typing import Any

from tidemark.peer_client.outbox import Outbox


class _Log:
    def __init__(self) -> None:
        self.appended, self.served = 0, 0

    def append(self, key: str, value: bytes, on_delivery: Any = None) -> None:
        self.appended += 1

    def serve(self) -> None:
        self.served += 1


def test_the_sender_serves_callbacks_every_512_appends_and_counts_it() -> None:
    log = _Log()
    out = Outbox("A", "inc", "", "test", log, None, None, 100, 100, 1 << 20,  # type: ignore[arg-type]
                 {}, lambda peer: None)
    for i in range(1, 1600):
        out.append_now("B", b"x", None)
        assert out.served == log.served == i // 512
    assert (out.logged, log.appended) == (1599, 1599)


class _Handle:
    def __init__(self) -> None:
        self.done: list[Any] = []

    def part_done(self, error: Any) -> None:
        self.done.append(error)


class _SlowDirect:
    """A direct port whose calls complete when the test says so."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []  # (messages, payload bytes) per call
        self.pending: list[Any] = []

    def deliver(self, endpoint: str, batch: bytes, done: Any) -> None:
        from tidemark.peer_client.records import peer_codec
        msgs = peer_codec().decode(batch).record["messages"]
        self.calls.append((len(msgs), sum(len(m["payload"]) for m in msgs)))
        self.pending.append(done)


def test_direct_batches_are_cut_by_payload_bytes_as_well_as_by_count() -> None:
    from tidemark.peer_client.outbox import OutItem
    direct = _SlowDirect()
    out = Outbox("A", "inc", "", "test", _Log(), direct, None, 100, 100, 1 << 20,  # type: ignore[arg-type]
                 {"direct_delivered": 0, "direct_failed": 0}, lambda peer: "b:1",
                 batch_bytes=250_000)
    handles = [_Handle() for _ in range(12)]

    def item(i: int, size: int) -> OutItem:
        return OutItem(None, {"message_id": f"m{i}", "message_type": "t", "payload": b"x" * size,
                              "timestamp_ms": 0, "persistent": False}, handles[i], "direct")
    out.put("B", item(0, 10))                    # the lane's first call, left pending
    for i in range(1, 11):
        out.put("B", item(i, 100_000))           # queued behind it: ten of 100 kB
    out.put("B", item(11, 400_000))              # one larger than the limit goes alone
    while direct.pending:
        direct.pending.pop(0)({"incarnation": "i1", "error": ""}, None)
    assert direct.calls == [(1, 10), (2, 200_000), (2, 200_000), (2, 200_000), (2, 200_000),
                            (2, 200_000), (1, 400_000)]
    assert all(h.done == [None] for h in handles)
