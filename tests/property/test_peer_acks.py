"""Ack batching never loses, duplicates or reorders an ack; batches respect count and linger."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.acks import AckBatcher

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
