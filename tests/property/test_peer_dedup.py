"""Dedup by message id is bounded and matches an insertion-ordered model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.dedup import DedupWindow


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.lists(st.tuples(st.sampled_from(["seen", "forget"]),
                                             st.integers(0, 15)), max_size=150))
def test_window_matches_model(capacity: int, ops: list) -> None:
    window, model = DedupWindow(capacity), []
    for op, n in ops:
        mid = f"m{n}"
        if op == "seen":
            new = mid not in model
            assert window.check_and_add(mid) == new
            if new:
                model.append(mid)
                if len(model) > capacity:
                    model.pop(0)
        else:
            window.forget(mid)
            if mid in model:
                model.remove(mid)
        assert len(window) == len(model) <= capacity
        assert all(m in window for m in model)
