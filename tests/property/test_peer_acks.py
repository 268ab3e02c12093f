"""Ack batching never loses, duplicates or reorders an ack; batches respect count and linger."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.acks import AckBatcher, RangeAcks

steps = st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 50)),
                           st.tuples(st.just("tick"), st.integers(0, 50)),
                           st.tuples(st.just("drain"), st.just(0))), max_size=200)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10), st.integers(0, 40), steps)
def test_every_ack_comes_out_exactly_once_in_order(max_batch: int, linger: int,
                                                   sequence: list) -> None:
    b: AckBatcher[int] = AckBatcher(max_batch, linger)
    now, added, out, first_at = 0, [], [], {}
    for op, dt in sequence:
        now += dt
        if op == "add":
            item = len(added)
            added.append(item)
            first_at.setdefault(item, now)
            batch = b.add(item, now)
            if batch is not None:
                assert len(batch) == max_batch
                out.extend(batch)
        elif op == "tick":
            pending_before = len(b)
            oldest = added[len(out)] if pending_before else None
            batch = b.due(now)
            if batch:
                assert now - first_at[oldest] >= linger
                out.extend(batch)
            elif pending_before:
                assert now - first_at[oldest] < linger
        else:
            out.extend(b.drain())
        assert 0 <= len(b) < max_batch
        assert out + list(range(len(out), len(out) + len(b))) == added
    out.extend(b.drain())
    assert out == added
    assert b.next_due_ms is None and len(b) == 0


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10), st.integers(0, 40),
       st.lists(st.tuples(st.integers(0, 25), st.integers(0, 30)), max_size=30))
def test_add_many_is_add_one_by_one(max_batch: int, linger: int,
                                    steps: list[tuple[int, int]]) -> None:
    """The same batches come out, and the same pending acks stay with the same due time."""
    one: AckBatcher[int] = AckBatcher(max_batch, linger)
    many: AckBatcher[int] = AckBatcher(max_batch, linger)
    now, n = 0, 0
    for count, dt in steps:
        now += dt
        items = list(range(n, n + count))
        n += count
        by_one = [batch for item in items if (batch := one.add(item, now)) is not None]
        assert many.add_many(items, now) == by_one
        assert len(many) == len(one) and many.next_due_ms == one.next_due_ms
        assert many.due(now) == one.due(now)
    assert many.drain() == one.drain()


def _acker(max_batch: int, ranges: bool):  # type: ignore[no-untyped-def]
    """A real Acker over an in-memory log: every appended record, decoded."""
    from collections import Counter

    from tidemark.log.wire import AckBatchEncoder, default_codec
    from tidemark.peer_client.acks import Acker
    codec, logged = default_codec(), []

    class Log:
        def append(self, key: str, value: bytes, on_delivery=None) -> None:  # type: ignore[no-untyped-def]
            logged.append(codec.decode(value).record)
    acker = Acker("bob", "default", AckBatcher(max_batch, 10_000), log_port=Log(),  # type: ignore[arg-type]
                  encode_acks=AckBatchEncoder(codec, "bob", "default").encode,
                  encode_record=codec.encode, clock_ms=lambda: 0, stats=Counter(),
                  ranges=RangeAcks(max_batch, 10_000) if ranges else None)
    return acker, logged


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 7), st.lists(st.tuples(st.booleans(), st.integers(0, 3),
                                             st.integers(0, 10**9), st.booleans()),
                                   max_size=60), st.lists(st.integers(1, 9), max_size=20))
def test_range_acks_ack_what_per_id_acks_ack(max_batch: int, msgs: list, cuts: list) -> None:
    """Replayed messages (a txlog position) and live ones, acked in random chunks: with
    range acks, the records list every acked id once, as per-id acks do; a ranged record's
    ids all lie in one partition between its first and last offset (so a replica that
    indexes the range releases exactly their Sends), and live ids go without a range."""
    from tidemark.peer_client.records import Envelope
    envs = [Envelope(f"m{i}", "al", "t", b"", 0, persistent, "default", 0, replayed,
                     k if replayed else -1, off if replayed else -1)
            for i, (replayed, k, off, persistent) in enumerate(msgs)]
    where = {e.message_id: (e.txlog_partition, e.txlog_offset) for e in envs}
    results = {}
    for ranges in (False, True):
        acker, logged = _acker(max_batch, ranges)
        at = 0
        for n in cuts + [len(envs)]:
            acker.ack_many(envs[at:at + n])
            at += n
        acker.flush()
        results[ranges] = logged
        for rec in logged:
            k = rec["txlog_partition"]
            if k < 0:  # by id: live messages (or every message without range acks)
                assert not ranges or all(where[m][1] < 0 for m in rec["message_ids"])
                continue
            assert ranges and len(rec["message_ids"]) <= max_batch
            for m in rec["message_ids"]:
                assert where[m][0] == k and rec["first_offset"] <= where[m][1] <= rec["last_offset"]
            offs = [where[m][1] for m in rec["message_ids"]]
            assert (rec["first_offset"], rec["last_offset"]) == (min(offs), max(offs))

    def ids(logged: list) -> list[str]:
        return sorted(m for rec in logged for m in rec["message_ids"])
    assert ids(results[True]) == ids(results[False]) == sorted(
        e.message_id for e in envs if e.persistent)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 7), st.booleans(), st.integers(0, 3),
       st.lists(st.integers(0, 10**6), max_size=40, unique=True),
       st.lists(st.integers(1, 9), max_size=10), st.data())
def test_acking_columns_appends_what_acking_their_envelopes_appends(
        max_batch: int, ranges: bool, partition: int, offsets: list[int], cuts: list[int],
        data: st.DataObject) -> None:
    """The lean replay path acks a chunk's handled positions straight from its columns
    (``Acker.ack_columns``): the same records, ranges included, as ``ack_many`` of the
    Envelopes of those positions."""
    from tidemark.peer_client.columns import Columns
    n = len(offsets)
    cols = Columns(partition, "default", offsets, [f"m{o}" for o in offsets], ["S"] * n,
                   ["t"] * n, [b""] * n, [0] * n, [0] * n)
    by_columns, from_columns = _acker(max_batch, ranges)
    by_envelopes, from_envelopes = _acker(max_batch, ranges)
    at = 0
    for cut in cuts + [n]:
        chunk = list(range(at, min(n, at + cut)))
        positions = [k for k in chunk if data.draw(st.booleans())] if chunk else []
        by_columns.ack_columns(cols, positions)
        by_envelopes.ack_many([cols.envelope(k) for k in positions])
        at += cut
    by_columns.flush()
    by_envelopes.flush()
    assert from_columns == from_envelopes
