"""Handler execution: plain functions on a bounded thread pool, ``async def`` on an event
loop; one job at a time per sender, so each sender's messages are handled in order."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tidemark.peer_client.lanes import KeyedLanes

__all__ = ["ThreadExecutor", "LoopThread"]

log = logging.getLogger("peer_client.executor")


class LoopThread:
    """An asyncio loop in a daemon thread, for async handlers of a synchronous Peer."""

    def __init__(self, name: str = "peer-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self.loop.is_running():
            self.loop.close()


class ThreadExecutor:
    """Per-key ordered execution over a thread pool and an event loop."""

    def __init__(self, workers: int, loop: asyncio.AbstractEventLoop | None = None,
                 name: str = "peer") -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{name}-handler")
        self._loop = loop
        self._own_loop: LoopThread | None = None
        self._lanes: KeyedLanes[Any] = KeyedLanes()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0

    def set_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """The loop that runs ``async def`` handlers (default: a private loop thread)."""
        self._loop = loop

    def _loop_for_async(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            with self._lock:
                if self._own_loop is None:
                    self._own_loop = LoopThread()
            return self._own_loop.loop
        return self._loop

    def submit(self, key: str, job: Any) -> None:
        """Queue ``job`` behind the running job of ``key``."""
        with self._lock:
            self._active += 1
            start = self._lanes.push(key, job)
        if start:
            self._start(key, job)

    def submit_many(self, key: str, jobs: Sequence[Any]) -> None:
        """Queue ``jobs`` in order behind the running job of ``key``, under one lock: one
        worker runs the whole run without a thread handoff per job."""
        if not jobs:
            return
        with self._lock:
            self._active += len(jobs)
            push = self._lanes.push
            start = push(key, jobs[0])
            for job in jobs[1:]:
                push(key, job)  # the lane is busy now: queued
        if start:
            self._start(key, jobs[0])

    def _start(self, key: str, job: Any) -> None:
        if job.is_async:
            fut = asyncio.run_coroutine_threadsafe(job.run_async(), self._loop_for_async())
            fut.add_done_callback(lambda f: self._done(key, f))
        else:
            self._pool.submit(self._run, key, job)

    def _run(self, key: str, job: Any) -> None:
        while job is not None:
            try:
                job.run()
            except BaseException:  # noqa: BLE001 - job.run catches handler errors itself
                log.exception("handler job crashed")
            job = self._advance(key)
            if job is not None and job.is_async:
                self._start(key, job)
                return

    def _done(self, key: str, fut: Any) -> None:
        if fut.cancelled() or fut.exception() is not None:
            log.error("async handler job did not finish: %r",
                      None if fut.cancelled() else fut.exception())
        job = self._advance(key)
        if job is not None:
            self._start(key, job)

    def _advance(self, key: str) -> Any:
        with self._lock:
            self._active -= 1
            if not self._active:
                self._idle.notify_all()
            return self._lanes.next(key)

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted job finished; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.5))
        return True

    @property
    def active(self) -> int:
        """Jobs submitted and not finished."""
        return self._active

    def close(self) -> None:
        """Stop the workers (after :meth:`drain`)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_loop is not None:
            self._own_loop.close()
