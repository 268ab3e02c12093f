"""The persisted dedup store's expiry matches a dict reference model, decision and LevelDB."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.dedup_store import DedupStore, expired


def _model_expire(model: dict[str, int], now_ms: int, ttl_ms: int, max_entries: int) -> None:
    """The reference: drop what is older than the window, then the oldest beyond the count."""
    for mid in [m for m, ts in model.items() if ts < now_ms - ttl_ms]:
        del model[mid]
    while len(model) > max_entries:
        del model[min(model, key=lambda m: (model[m], m))]


entries = st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.integers(0, 100),
                          max_size=40)


@settings(max_examples=400, deadline=None)
@given(entries, st.integers(0, 150), st.integers(1, 80), st.integers(1, 45))
def test_expired_matches_the_model(model: dict[str, int], now_ms: int, ttl_ms: int,
                                   max_entries: int) -> None:
    ordered = sorted((ts, m) for m, ts in model.items())
    read: list[tuple[int, str]] = []

    def lazily():  # noqa: ANN202 - records how far the decision read
        for item in ordered:
            read.append(item)
            yield item

    gone = expired(lazily(), len(model), now_ms, ttl_ms, max_entries)
    expect = dict(model)
    _model_expire(expect, now_ms, ttl_ms, max_entries)
    assert gone == ordered[:len(gone)]  # a prefix, oldest first
    assert {m for _, m in gone} == set(model) - set(expect)
    assert len(read) <= len(gone) + 1  # stops at the first entry it keeps


ops = st.lists(st.one_of(
    st.tuples(st.just("record"), st.text("xyz", min_size=1, max_size=3), st.integers(0, 60)),
    st.tuples(st.just("sweep"), st.just(""), st.integers(0, 120)),
    st.tuples(st.just("reopen"), st.just(""), st.just(0)),
), max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops, st.integers(1, 50), st.integers(1, 8))
def test_store_matches_the_model_across_reopens(steps: list, ttl_ms: int,
                                               max_entries: int) -> None:
    model: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as root:
        def open_store() -> DedupStore:
            return DedupStore.for_peer(root, "B", "test", ttl_ms, max_entries)

        store = open_store()
        try:
            for op, mid, t in steps:
                if op == "record":
                    assert store.record(mid, t) == (mid not in model)
                    model.setdefault(mid, t)
                elif op == "sweep":
                    before = len(model)
                    _model_expire(model, t, ttl_ms, max_entries)
                    assert store.sweep(t) == before - len(model)
                else:
                    store.close()
                    store = open_store()
                assert len(store) == len(model)
                assert all(m in store for m in model)
                assert not any(m in store for m in ("x", "y", "z", "xy") if m not in model)
        finally:
            store.close()
