"""Dedup by message id is bounded and never forgets the most recent ids."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.dedup import DedupWindow


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.lists(st.tuples(st.sampled_from(["seen", "forget"]),
                                             st.integers(0, 15)), max_size=150))
def test_window_matches_model(capacity: int, ops: list) -> None:
    """Against a model that remembers every id added and not forgotten since, in order: the
    window never claims an id the model does not hold, always holds the ``capacity`` most
    recent ones, and holds at most twice that."""
    window, model, added = DedupWindow(capacity), [], []
    for op, n in ops:
        mid = f"m{n}"
        if op == "seen":
            new = window.check_and_add(mid)
            assert new or mid in model  # never a duplicate it was not given
            if mid in model:
                assert not new or mid not in added[-capacity:], (added, mid)
                if new:  # forgotten with its generation, so added again
                    model.remove(mid)
            if new:
                model.append(mid)
                added.append(mid)
        else:
            window.forget(mid)
            if mid in model:
                model.remove(mid)
        # the ids among the last ``capacity`` added, unless forgotten since: remembered
        assert all(m in window for m in added[-capacity:] if m in model)
        assert all(m in model for m in (f"m{i}" for i in range(16)) if m in window)
        assert len(window) <= min(2 * capacity, len(model))
