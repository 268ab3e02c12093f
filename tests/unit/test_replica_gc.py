"""GC off the ingest path (issue 11 item 1): a pass over a store whose records are all
younger than the minimum age costs a constant, not the size of the store; passes run on
their own thread with bounded work each, and resume where they stopped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_replica_store import NOW, ack, apply, send

import tidemark.replica.release_policy as release_policy
from tests.support import wait_for
from tidemark.replica.config import ReleasePolicy
from tidemark.replica.gc_worker import GcWorker
from tidemark.replica.store import Store

DAY = 86_400_000


def test_a_young_store_is_not_re_read_every_pass(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "s", "n1")
    n = 20_000
    for start in range(0, n, 5000):
        apply(store, [send(f"m{i}", ts=NOW) if i % 2 == 0 else ack(f"m{i - 1}", ts=NOW)
                      for i in range(start, start + 5000)], start=start)
    read = [0]
    records = store.records

    def counting(*args: Any, **kwargs: Any) -> Iterator[tuple[int, bytes]]:
        for item in records(*args, **kwargs):
            read[0] += 1
            yield item
    monkeypatch.setattr(store, "records", counting)
    policy = ReleasePolicy(min_age_ms=DAY)  # the deploy config: nothing is a day old yet
    for _ in range(5):  # five GC intervals, the GC point at the end of the store
        assert release_policy.release(store, 0, n, policy, NOW) == 0
    assert read[0] <= 5  # one record looked at per pass, not the whole store
    assert release_policy.release(store, 0, n, policy, NOW + DAY) == n  # a day later
    store.close()


def test_gc_worker_runs_bounded_passes_on_its_own_thread(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    n = 30_000
    for start in range(0, n, 5000):
        apply(store, [send(f"m{i}") if i % 2 == 0 else ack(f"m{i - 1}")
                      for i in range(start, start + 5000)], start=start)
    released: list[int] = []
    passes: list[int] = []
    worker = GcWorker(
        store, lambda: [0], lambda: {"txlog/0": n}, ReleasePolicy(gc_interval_ms=50),
        on_released=released.append, pass_records=2_000,
        on_pass=lambda results: passes.append(sum(r.visited for r in results.values())))
    worker.start()
    try:
        assert worker.thread is not None and worker.thread.name == "gc"
        wait_for(lambda: sum(released) == n, 60, what="every record released")
    finally:
        worker.stop()
    assert worker.thread is None or not worker.thread.is_alive()
    assert max(passes) <= 2_000 and len([p for p in passes if p]) >= n // 2_000
    assert list(store.records(0)) == [] and store.map("txlog", 0).floor == n
    store.close()


def test_gc_never_loses_an_ingest_map_update(tmp_path: Path) -> None:
    """GC raises the floor while ingest commits maps from another thread: neither update
    is lost (the floor and the base end only rise)."""
    import threading
    store = Store(tmp_path / "s", "n1")
    apply(store, [send(f"m{i}") if i % 2 == 0 else ack(f"m{i - 1}") for i in range(2000)])
    worker = GcWorker(
        store, lambda: [0], lambda: {"txlog/0": store.map("txlog", 0).base_end},
        ReleasePolicy(gc_interval_ms=10), pass_records=500, share=0.5)
    stop = threading.Event()
    worker.start()
    try:
        end = 2000
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            apply(store, [send(f"x{end}"), ack(f"x{end}")], start=end)
            end += 2
            assert store.map("txlog", 0).base_end == end
        stop.set()
        wait_for(lambda: store.map("txlog", 0).floor == end, 30, what="GC caught up")
    finally:
        worker.stop()
    store.close()
    store = Store(tmp_path / "s", "n1")  # what is on disk agrees
    assert store.map("txlog", 0).base_end == end and store.map("txlog", 0).floor == end
    store.close()


def test_a_sweep_goes_on_while_the_cursor_waits_at_a_young_record(tmp_path: Path) -> None:
    """Pending Sends are swept in bounded passes, and a pass that stopped on its budget
    asks for the next one at once even though the cursor waits for a young record."""
    from tidemark.replica.release_policy import collect
    store = Store(tmp_path / "s", "n1")
    apply(store, [send(f"m{i}") for i in range(100)])
    policy = ReleasePolicy(min_age_ms=5_000)
    assert collect(store, 0, 100, policy, NOW).released == 0  # all pending: not acked yet
    apply(store, [ack(f"m{i}") for i in range(100)] + [send("young", ts=NOW)], start=100)
    results = [collect(store, 0, 201, policy, NOW, budget=60)]
    while results[-1].more:
        results.append(collect(store, 0, 201, policy, NOW, budget=60))
    assert results[-1].blocked and not results[-1].sweeping  # only the young Send is left
    assert any(r.blocked and r.sweeping and r.more for r in results)
    assert sum(r.swept for r in results) == 100 and max(r.visited + r.swept
                                                       for r in results) <= 60
    assert [o for o, _ in store.records(0)] == [200]
    store.close()
