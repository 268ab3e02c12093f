"""The GC thread: bounded passes of :func:`tidemark.replica.release_policy.collect`, off the ingest
path."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from tidemark.log import clock
from tidemark.replica.config import ReleasePolicy
from tidemark.replica.release_policy import PassResult, collect
from tidemark.replica.store import Store

__all__ = ["GcWorker"]

log = logging.getLogger("replica.release_policy")


class GcWorker:
    """Runs GC passes on a thread of its own, off the ingest path.

    Every pass visits at most ``pass_records`` records per partition and resumes where the
    last one stopped, so a pass is short (tens of milliseconds). While work is ready (a pass
    stopped on its budget) the next pass follows after a pause of ``(1 - share) / share``
    times the pass's duration, so GC takes at most about ``share`` of the time (and of the
    interpreter lock) from ingest — ``idle_share`` while ``idle()`` says ingest has slack (it
    is not catching up a backlog); otherwise (done, or waiting at a record younger than the
    minimum age) it waits ``gc_interval_ms``.
    """

    def __init__(self, store: Store, partitions: Callable[[], list[int]],
                 points: Callable[[], Mapping[str, int]], policy: ReleasePolicy,
                 on_released: Callable[[int], object] = lambda n: None,
                 pass_records: int = 1_000, share: float = 0.15,
                 on_pass: Callable[[dict[int, PassResult]], object] = lambda r: None,
                 idle: Callable[[], bool] = lambda: False, idle_share: float = 0.5) -> None:
        self.store, self.partitions, self.points, self.policy = store, partitions, points, policy
        self.on_released, self.on_pass, self.idle = on_released, on_pass, idle
        self.pass_records, self.share, self.idle_share = pass_records, share, idle_share
        self.thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one pass at a time (the thread, or run_once)
        self.passes = 0
        self.released = 0

    def run_once(self, now_ms: int | None = None) -> dict[int, PassResult]:
        """One pass over every partition; returns each partition's result."""
        now = clock.now_ms() if now_ms is None else now_ms
        points = self.points()
        out: dict[int, PassResult] = {}
        with self._lock:
            for k in self.partitions():
                point = points.get(f"txlog/{k}", 0)
                if point <= 0:
                    continue
                out[k] = result = collect(self.store, k, point, self.policy, now,
                                          self.pass_records)
                if result.released:
                    self.released += result.released
                    self.on_released(result.released)
            self.passes += 1
        self.on_pass(out)
        return out

    def _loop(self) -> None:
        interval = self.policy.gc_interval_ms / 1000
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                results = self.run_once()
            except Exception as exc:  # a pass failing must not end GC: retried next time
                if self._stop.is_set():
                    return
                log.warning("GC pass failed, will retry: %s", exc)
                results = {}
            took = time.monotonic() - started
            more = any(r.more for r in results.values())
            share = self.idle_share if self.idle() else self.share
            self._stop.wait(max(0.001, took * (1 - share) / share) if more else interval)

    def start(self) -> None:
        """Start the GC thread."""
        self._stop.clear()
        self.thread = threading.Thread(target=self._loop, name="gc", daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread after its current pass (a pass is bounded, so this is short)."""
        self._stop.set()
        if self.thread is not None:
            self.thread.join(timeout)
