"""After a failed direct call the sender's messages to that peer take the log (unmarked)
until Kafka has confirmed every one of them; the next direct batch then carries the offset
of the last one as ``log_floor``, so the recipient can hold it until its follower has
dispatched them (per-sender order across a failed call). A direct copy sent while such an
append is unconfirmed could be handled before it: the nemesis saw exactly that."""

from __future__ import annotations

from typing import Any

from tidemark.peer_client.outbox import Outbox, OutItem
from tidemark.peer_client.records import peer_codec


class _Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

    def partition(self) -> int:
        return 0


class _Log:
    """Appends get offsets in order; their delivery reports come when the test says."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.reports: list[tuple[Any, int]] = []

    def append(self, key: str, value: bytes, on_delivery: Any = None) -> None:
        self.reports.append((on_delivery, len(self.values)))
        self.values.append(value)

    def confirm_all(self) -> None:
        reports, self.reports = self.reports, []
        for cb, off in reports:
            cb(None, _Msg(off))


class _Direct:
    def __init__(self) -> None:
        self.fail = True
        self.batches: list[dict[str, Any]] = []

    def deliver(self, endpoint: str, batch: bytes, done: Any) -> None:
        rec = peer_codec().decode(batch).record
        self.batches.append(rec)
        if self.fail:
            done(None, ConnectionError("link down"))
        else:
            done({"incarnation": "b1", "accepted": len(rec["messages"])}, None)


class _Handle:
    def __init__(self) -> None:
        self.done: list[Any] = []

    def part_done(self, error: Any) -> None:
        self.done.append(error)

    def __call__(self, err: Any, msg: Any) -> None:
        self.done.append(err)


def _item(n: int) -> OutItem:
    direct = {"message_id": f"m{n}", "message_type": "t", "payload": b"p",
              "timestamp_ms": 0, "persistent": True}
    return OutItem(f"send-{n}".encode() + b"\x00", direct, _Handle(), "log")  # type: ignore[arg-type]


def test_after_a_failed_call_the_next_direct_batch_waits_for_the_logged_ones() -> None:
    log, direct = _Log(), _Direct()
    out = Outbox("A", "inc", "", "test", log, direct, None, 1, 0, 1 << 20,  # type: ignore[arg-type]
                 {"direct_delivered": 0, "direct_failed": 0}, lambda peer: "b:1")
    out.put("B", _item(1))                  # the call fails: m1 goes to the log, unmarked
    assert len(direct.batches) == 1 and log.values == [b"send-1\x00"]
    assert not out.reachable("B")           # m1's offset is not known yet
    out.put("B", _item(2))                  # queued direct (the lane's view), sent to the log
    assert len(direct.batches) == 1 and len(log.values) == 2
    log.confirm_all()                       # Kafka confirms m1 and m2 at offsets 0 and 1
    assert out.reachable("B")
    direct.fail = False
    out.put("B", _item(3))
    assert len(direct.batches) == 2
    assert direct.batches[1]["log_floor"] == 1  # m3 is handled after offset 1 is dispatched
    out.put("B", _item(4))
    assert direct.batches[2]["log_floor"] == -1  # nothing took the log since


def test_a_peer_up_but_not_reachable_is_tracked_like_a_failed_call() -> None:
    # a stale heartbeat (the directory's view lagging behind a broker fault) sends messages
    # to the log without any failed call: they must keep their place too
    log, direct = _Log(), _Direct()
    direct.fail = False
    out = Outbox("A", "inc", "", "test", log, direct, None, 1, 0, 1 << 20,  # type: ignore[arg-type]
                 {"direct_delivered": 0, "direct_failed": 0}, lambda peer: "b:1")
    out.begin_detour("B")
    logged = _item(1)
    logged.direct = None                    # the sender saw B as not alive
    out.put_logged("B", logged)
    assert not out.reachable("B") and log.values == [b"send-1\x00"]
    log.confirm_all()
    out.put("B", _item(2))                  # B alive again: direct, behind offset 0
    assert direct.batches[0]["log_floor"] == 0
