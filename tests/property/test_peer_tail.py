"""A replay that starts on what the queues cover, plus the tail read from txlog
(``peer_client.replay.tail``), delivers what a replay of the whole log would: checked against a
model of the queues job (Sends queued, Acks and dead letters remove, DeliveryFailed
counts, a terminal one dead-letters at once, a Purge clears; an Ack before its Send keeps the
Send out, and failures before it count when it comes)."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tidemark.peer_client.records import Envelope
from tidemark.peer_client.replay.tail import Tail

LIMIT = 3

ops = st.lists(st.one_of(
    st.tuples(st.sampled_from(["send", "ack", "fail", "fail", "term"]), st.integers(0, 12)),
    st.just(("purge", -1))), max_size=60)


def model(records: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """The queue after ``records``: message id -> (delivery count, offset of its Send)."""
    q: dict[str, list[int]] = {}
    gone: set[str] = set()
    early: dict[str, tuple[int, bool]] = {}  # failures before the Send: (count, terminal)
    for off, (kind, n) in enumerate(records):
        mid = f"m{n}"
        if kind == "send":
            if mid not in q and mid not in gone:
                count, terminal = early.pop(mid, (0, False))
                if count >= LIMIT or terminal:
                    gone.add(mid)
                else:
                    q[mid] = [count, off]
        elif kind in ("fail", "term"):  # a term: a terminal failure, dead-letters at once
            if mid in q:
                q[mid][0] += 1
                if q[mid][0] >= LIMIT or kind == "term":
                    del q[mid]
                    gone.add(mid)
            elif mid not in gone:
                count, terminal = early.get(mid, (0, False))
                early[mid] = (count + 1, terminal or kind == "term")
        elif kind == "ack":
            early.pop(mid, None)
            q.pop(mid, None)
            gone.add(mid)
        else:
            gone.update(q)
            q.clear()
    return {m: (c, o) for m, (c, o) in q.items()}


def _env(mid: str, count: int, off: int) -> Envelope:
    return Envelope(mid, "A", "t.T", b"", 0, True, "test", count, True, 0, off)


@settings(max_examples=500, deadline=None)
@given(ops, st.data())
def test_covered_replay_plus_tail_equals_the_whole_queue(records: list[tuple[str, int]],
                                                         data: st.DataObject) -> None:
    # each message is sent at most once (a duplicate Send is the dedup window's case)
    sends = [n for kind, n in records if kind == "send"]
    assume(len(sends) == len(set(sends)))
    barrier = data.draw(st.integers(0, len(records)), label="barrier")
    lookback = data.draw(st.integers(0, barrier), label="lookback")
    # an Ack or a failure before its Send is within the look-back, as the reader ensures
    # by time
    send_at = {n: off for off, (kind, n) in enumerate(records) if kind == "send"}
    for off, (kind, n) in enumerate(records):
        if kind in ("ack", "fail", "term") and n in send_at and off < send_at[n] and send_at[n] >= barrier:
            assume(off >= barrier - lookback)
    tail = Tail(barrier, len(records))
    for off in range(barrier - lookback, len(records)):
        kind, n = records[off]
        name = {"send": "Send", "ack": "AckBatch", "fail": "DeliveryFailed",
                "term": "DeliveryFailed", "purge": "Purge"}[kind]
        rec = {"message_ids": [f"m{n}"], "message_id": f"m{n}", "peer": "B",
               "terminal": kind == "term"}
        tail.fold(name, rec, off, acks_only=off < barrier)
    covered = model(records[:barrier])
    replayed = tail.admit([_env(m, c, o) for m, (c, o) in sorted(covered.items(),
                                                                  key=lambda kv: kv[1][1])],
                          LIMIT)
    forwarded = tail.admit([_env(f"m{n}", 0, off) for off, (kind, n) in enumerate(records)
                            if kind == "send" and off >= barrier], LIMIT)
    got = {e.message_id: (e.delivery_count, e.txlog_offset) for e in replayed + forwarded}
    assert len(got) == len(replayed) + len(forwarded)
    assert got == model(records)
