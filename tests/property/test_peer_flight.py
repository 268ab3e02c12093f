"""Flight-size accounting: never above the limit, never negative; ordered lanes run each item
exactly once, in per-key order, one at a time per key."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.flight import FlightWindow
from tidemark.peer_client.lanes import KeyedLanes


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10), st.lists(st.booleans(), max_size=200))
def test_window_never_exceeds_the_limit(limit: int, ops: list) -> None:
    w, model = FlightWindow(limit), 0
    for acquire in ops:
        if acquire:
            ok = w.try_acquire()
            assert ok == (model < limit)
            model += ok
        elif model:
            w.release()
            model -= 1
        else:
            with pytest.raises(RuntimeError):
                w.release()
        assert w.in_flight == model and 0 <= model <= limit


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from("abc"), max_size=80), st.integers(0, 2**32), st.integers(1, 4))
def test_lanes_run_each_item_once_in_key_order(keys: list, seed: int, take: int) -> None:
    rng = random.Random(seed)
    lanes: KeyedLanes[tuple[str, int]] = KeyedLanes()
    running: dict[str, list[tuple[str, int]]] = {}
    done: list[tuple[str, int]] = []
    todo = [(k, i) for i, k in enumerate(keys)]
    while todo or running:
        if todo and (not running or rng.random() < 0.5):
            item = todo.pop(0)
            if lanes.push(item[0], item):
                assert item[0] not in running
                running[item[0]] = [item] + lanes.take(item[0], take - 1)
        else:
            key = rng.choice(sorted(running))
            done.extend(running.pop(key))
            nxt = lanes.next(key)
            if nxt is not None:
                running[key] = [nxt] + lanes.take(key, take - 1)
    assert sorted(done, key=lambda x: x[1]) == [(k, i) for i, k in enumerate(keys)]
    for key in "abc":
        seq = [i for k, i in done if k == key]
        assert seq == sorted(seq)
    assert lanes.pending == 0 and lanes.keys() == []
