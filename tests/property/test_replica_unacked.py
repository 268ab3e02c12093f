"""A replay session's unacked entries (``replica.unacked.Unacked``) against a plain queue of
offsets, the model the session kept before: chunks sent in txlog order, acks by count and
by offset, in any interleaving, leave the same entries unacked and report the same counts."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.replica.unacked import Unacked

_OPS = st.lists(st.one_of(
    st.tuples(st.just("send"), st.lists(st.integers(1, 5), max_size=6)),  # gaps between offsets
    st.tuples(st.just("ack"), st.integers(-2, 12)),
    st.tuples(st.just("through"), st.integers(-3, 60)),
), max_size=40)


@settings(max_examples=400, deadline=None)
@given(_OPS)
def test_unacked_counts_like_a_queue_of_offsets(ops: list[tuple[str, object]]) -> None:
    real, model = Unacked(), deque[int]()
    nxt = 0
    for op, arg in ops:
        if op == "send":
            assert isinstance(arg, list)
            offsets = []
            for gap in arg:
                nxt += gap
                offsets.append(nxt)
            real.extend(offsets)
            model.extend(offsets)
        elif op == "ack":
            assert isinstance(arg, int)
            n = min(max(0, arg), len(model))
            for _ in range(n):
                model.popleft()
            assert real.take(arg) == n
        else:
            assert isinstance(arg, int)
            n = 0
            while model and model[0] <= arg:
                model.popleft()
                n += 1
            assert real.take_through(arg) == n
        assert len(real) == len(model)
    # what is left is the model's: acking it all by offset takes exactly those
    if model:
        assert real.take_through(model[-1]) == len(model) and len(real) == 0
