"""Pending range acks (``peer_client.acks.RangeAcks``, columns per partition) against the
model they replaced: an :class:`AckBatcher` of ``(partition, offset, id)`` tuples whose
drained batches are grouped by partition (first appearance first) and cut by ``bounds``,
each run with its lowest and highest offset. Any interleaving of adds, lingering and drains
gives the same runs in the same order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.acks import AckBatcher, RangeAcks, RangeRun, bounds


def _model_runs(acks: list[tuple[int, int, str]], max_ids: int, max_bytes: int
                ) -> list[RangeRun]:
    parts: dict[int, list[tuple[int, int, str]]] = {}
    for ack in acks:
        parts.setdefault(ack[0], []).append(ack)
    out: list[RangeRun] = []
    for k, run in parts.items():
        ids = [a[2] for a in run]
        for start, end in bounds(ids, max_ids, max_bytes):
            offsets = [a[1] for a in run[start:end]]
            out.append((ids[start:end], (k, min(offsets), max(offsets))))
    return out


_OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), st.lists(st.text("ab", max_size=6),
                                                          max_size=9)),
    st.tuples(st.just("wait"), st.integers(0, 30), st.just([])),
    st.tuples(st.just("drain"), st.just(0), st.just([])),
), max_size=30)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 7), st.integers(0, 20), st.integers(4, 40), _OPS)
def test_range_acks_cut_what_the_tuple_model_cuts(max_batch: int, linger: int, max_bytes: int,
                                                   ops: list) -> None:
    real = RangeAcks(max_batch, linger, max_bytes)
    model: AckBatcher[tuple[int, int, str]] = AckBatcher(max_batch, linger)
    now, offset = 0, 0
    for op, arg, ids in ops:
        if op == "add":
            offsets = list(range(offset, offset + 3 * len(ids), 3))[::-1]  # any order
            offset += 3 * len(ids)
            got = real.add(arg, offsets, ids, now)
            added = list(zip([arg] * len(ids), offsets, ids, strict=True))
            want = [run for batch in model.add_many(added, now)
                    for run in _model_runs(batch, max_batch, max_bytes)]
            assert got == want
        elif op == "wait":
            now += arg
            batch = model.due(now)
            assert real.due(now) == (_model_runs(batch, max_batch, max_bytes) if batch else [])
        else:
            assert real.drain() == _model_runs(model.drain(), max_batch, max_bytes)
        assert len(real) == len(model) and real.next_due_ms == model.next_due_ms
