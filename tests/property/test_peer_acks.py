"""Ack batching never loses, duplicates or reorders an ack; batches respect count and linger."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from peer_client.acks import AckBatcher

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
