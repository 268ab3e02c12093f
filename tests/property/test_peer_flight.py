"""Flight-size accounting: never above the limit, never negative; ordered lanes run each item
exactly once, in per-key order, one at a time per key."""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.exceptions import FlightSizeExceededError
from tidemark.peer_client.flight import RAISE, FlightControl, FlightWindow
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
@given(st.integers(1, 10),
       st.lists(st.one_of(st.just(0), st.integers(1, 4), st.just(-1)), max_size=200))
def test_lock_free_control_matches_the_window_model(limit: int, ops: list) -> None:
    """FlightControl (counters, no lock while not full), in fail mode, against FlightWindow:
    an acquire of n slots succeeds exactly when the model has n free, and refusals and
    releases leave the same count. Op 0 = release, n > 0 = acquire n, -1 = wait_empty(0)."""
    ctl, model = FlightControl(limit, RAISE), FlightWindow(limit)
    for op in ops:
        if op == 0:
            if model.in_flight:
                model.release()
                ctl.release()
        elif op == -1:
            assert ctl.wait_empty(0) == (model.in_flight == 0)
        else:
            fits = model.in_flight + op <= limit
            if op > limit:
                with pytest.raises(ValueError):
                    ctl.acquire_many(op)
                continue
            if fits:
                (ctl.acquire(0) if op == 1 else ctl.acquire_many(op, 0))
                for _ in range(op):
                    assert model.try_acquire()
            else:
                with pytest.raises(FlightSizeExceededError) as err:
                    ctl.acquire(0) if op == 1 else ctl.acquire_many(op, 0)
                assert err.value.limit == limit and err.value.count == model.in_flight
        assert ctl.in_flight == model.in_flight


def test_lock_free_control_never_exceeds_its_limit_across_threads() -> None:
    """Four senders and two releasing threads on a window of 3: the slots held, counted under
    a lock of the test's own, never pass 3; every send gets its slot; the window ends empty
    and wait_empty sees it."""
    ctl, limit, per_sender = FlightControl(3), 3, 3000
    held, peak, guard = [0], [0], threading.Lock()
    to_release: list[int] = []
    more = threading.Semaphore(0)

    def sender() -> None:
        for _ in range(per_sender):
            ctl.acquire(10)
            with guard:
                held[0] += 1
                peak[0] = max(peak[0], held[0])
                to_release.append(1)
            more.release()

    def releaser(count: int) -> None:
        for _ in range(count):
            assert more.acquire(timeout=10)
            with guard:
                to_release.pop()
                held[0] -= 1
            ctl.release()

    total = 4 * per_sender
    threads = ([threading.Thread(target=sender) for _ in range(4)]
               + [threading.Thread(target=releaser, args=(total // 2,)) for _ in range(2)])
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert 1 <= peak[0] <= limit and held[0] == 0
    assert ctl.in_flight == 0 and ctl.wait_empty(1)


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
