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


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.lists(st.one_of(
    st.tuples(st.just("many"), st.lists(st.integers(0, 15), max_size=12)),
    st.tuples(st.just("seen"), st.integers(0, 15)),
    st.tuples(st.just("forget"), st.integers(0, 15))), max_size=40))
def test_checking_a_list_at_once_is_checking_it_one_by_one(capacity: int, ops: list) -> None:
    """``check_and_add_many`` (the lean replay path's bulk dedup) reports the positions
    ``check_and_add`` would refuse, and leaves the window exactly as one by one would,
    generations included, also for lists longer than the window and with repeated ids."""
    bulk, single = DedupWindow(capacity), DedupWindow(capacity)
    for op, arg in ops:
        if op == "many":
            mids = [f"m{n}" for n in arg]
            assert bulk.check_and_add_many(mids) == [
                i for i, mid in enumerate(mids) if not single.check_and_add(mid)]
        elif op == "seen":
            assert bulk.check_and_add(f"m{arg}") == single.check_and_add(f"m{arg}")
        else:
            bulk.forget(f"m{arg}")
            single.forget(f"m{arg}")
        assert (bulk._cur, bulk._old) == (single._cur, single._old)
