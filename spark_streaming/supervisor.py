"""In-process supervision of the queues query: a failed query is started again from its
checkpoint, after a backoff, by the job process itself.

A streaming query fails for reasons that do not outlive it: a Python worker killed or too slow
to connect back under load (``Python worker failed to connect back``), a Kafka request that
timed out, a batch whose ``flush`` was refused. Spark then stops the query
(``StreamingQueryException``) but the driver's SparkSession and its JVM stay usable, and the
checkpoint says where to resume: the batch that was in flight runs again from the same offsets
and state version, which writes the same rows (docs/queues.md, "Restarts").

:class:`Supervisor` runs that loop for :func:`tidemark.spark_streaming.job.run_job`, with no Spark
of its own (the unit tests drive it with fake queries):

* **Failure.** The query terminated with an exception, or starting it raised. One warning
  line is logged (``queues query failed; restart=N backoff_s=S ran_s=R error=first line``,
  the error JSON-escaped) and the status file is rewritten.
* **Session check.** ``recover`` (the job's) decides whether the session can start the query
  again: the same session if its SparkContext runs, a new one in the same JVM if the context
  was stopped, and :class:`~tidemark.spark_streaming.exceptions.QueryFailedError` (exit 1, for the
  process supervisor: ``tidemark local up``, systemd, Kubernetes) if the JVM is gone.
* **Backoff.** 1 s, doubling up to 30 s; a query that ran ``healthy_s`` (60 s) before failing
  starts the sequence again at 1 s. SIGTERM/SIGINT during the wait stop the job (exit 0).
* **Limit.** ``max_restarts`` (``TIDEMARK_QUEUES_MAX_RESTARTS``, 0 = unlimited): the failure
  after that many restarts is the job's error (exit 1), as before supervision.

The status file (``supervisor.json``; next to the ``--ready-file`` by default, so
``<state dir>/spark/supervisor.json`` in the local stack) holds
``{"pid", "state", "restarts", "last_error", "last_restart_ms", "counters"}``; ``state`` is
``starting``, ``running``, ``backoff``, ``stopped`` or ``failed``; ``counters`` are the job's
record counts (:meth:`Supervisor.set_counters`: poison records, records refused for their
environment or their signature, delivery letters). It is rewritten (atomically) at start and
at every change, and counts the restarts of that process only.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tidemark.log.exceptions import TidemarkError
from tidemark.spark_streaming.exceptions import QueryFailedError

__all__ = ["Backoff", "Supervisor", "STATUS_NAME", "read_status", "first_line", "summarize"]

log = logging.getLogger("spark_streaming.job")

#: The status file's name (next to the ready file unless ``--status-file`` says otherwise).
STATUS_NAME = "supervisor.json"

#: How often a running query is checked (and ``poll`` called), in seconds.
CHECK_S = 0.5


class Query(Protocol):
    """What the supervisor uses of a pyspark ``StreamingQuery``."""

    def awaitTermination(self, timeout: float) -> bool | None: ...  # noqa: N802 - pyspark API

    def exception(self) -> Any: ...


@dataclass(frozen=True)
class Backoff:
    """Waits between restarts: ``first_s`` doubling up to ``max_s``; a query that ran
    ``healthy_s`` before it failed starts the sequence again."""

    first_s: float = 1.0
    max_s: float = 30.0
    healthy_s: float = 60.0

    def delay(self, failures: int) -> float:
        """The wait before restart number ``failures`` of a sequence (1, 2, ...)."""
        return float(min(self.max_s, self.first_s * 2 ** max(0, min(failures - 1, 30))))


def first_line(error: object, limit: int = 400) -> str:
    """An error's first non-empty line, at most ``limit`` characters."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:limit]


_QUERY_IDS = re.compile(r" ?\[id = [0-9a-f-]+, runId = [0-9a-f-]+\]")
_TRACEBACK = re.compile(r"\s*(Return Message: )?Traceback \(most recent call last\):$")
_TASK_CAUSE = re.compile(r"most recent failure: Lost task .*?\): (?:[\w$]+\.)*([\w$]+: [^\n]*)")


def summarize(error: object) -> str:
    """One line for a failed query: its first line (without the query's ids and a trailing
    traceback header) and, when a task failed, the task's own error, e.g. ``[STREAM_FAILED]
    Query terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] ...; task failure:
    SparkException: Python worker exited unexpectedly (crashed)``."""
    text = str(error)
    head = _TRACEBACK.sub("", _QUERY_IDS.sub("", first_line(error, 10_000)))[:250]
    cause = _TASK_CAUSE.search(text)
    if cause is None:
        return head
    return f"{head}; task failure: {cause.group(1).split('. ')[0][:250]}"


def read_status(path: Path) -> dict[str, Any] | None:
    """The status file's content, or None if it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Supervisor:
    """Starts the query, watches it, and restarts it after a failure (module docstring)."""

    def __init__(self, status_file: Path | None = None, backoff: Backoff | None = None,
                 max_restarts: int = 0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.status_file = status_file
        self.backoff = backoff or Backoff()
        self.max_restarts = max_restarts
        self.clock, self.sleep, self.wall_ms = clock, sleep, wall_ms
        self.restarts = 0
        self.last_error: str | None = None
        self.last_restart_ms: int | None = None
        self.state = "starting"
        self.counters: dict[str, int] = {}

    # ---- status file --------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The status file's content."""
        return {"pid": os.getpid(), "state": self.state, "restarts": self.restarts,
                "last_error": self.last_error, "last_restart_ms": self.last_restart_ms,
                "counters": dict(self.counters)}

    def set_counters(self, counters: dict[str, int]) -> None:
        """The job's record counts; the status file is rewritten when they changed."""
        if counters != self.counters:
            self.counters = dict(counters)
            self._set(self.state)

    def _set(self, state: str) -> None:
        self.state = state
        if self.status_file is None:
            return
        try:
            self.status_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.status_file.with_name(f".{self.status_file.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.status()) + "\n")
            tmp.replace(self.status_file)
        except OSError as exc:  # the count is still in the log lines
            log.info("cannot write %s: %s", self.status_file, exc.strerror)

    # ---- the loop -----------------------------------------------------------------------
    def run(self, start: Callable[[], Query], *, stopping: Callable[[], bool],
            recover: Callable[[str], None], stop: Callable[[Query], None],
            poll: Callable[[Query], None] = lambda q: None,
            ready: Callable[[Query], None] = lambda q: None) -> int:
        """Run until a stop is requested (``stop(query)`` is called; returns 0), the query
        ends without an error (0), or a failure is not restarted (raises
        :class:`QueryFailedError`; a :class:`TidemarkError` from ``start`` or ``recover``
        is raised as it is).

        ``start`` starts the query; ``recover(error)`` prepares the session for the next
        start, or raises if it cannot; ``poll`` runs every :data:`CHECK_S` while the query
        runs; ``ready`` after every successful start.
        """
        self._set("starting")
        failures = 0  # of the current backoff sequence
        while True:
            started = self.clock()
            try:
                query = start()
                started = self.clock()
                self._set("running")
                ready(query)
                while not stopping():
                    if query.awaitTermination(CHECK_S):
                        break
                    poll(query)
                if stopping():
                    self._set("stopped")
                    stop(query)
                    return 0
                exc = query.exception()
                if exc is None:  # stopped from elsewhere (an embedding caller), no error
                    self._set("stopped")
                    return 0
                error = summarize(exc)
            except TidemarkError:
                self._set("failed")
                raise
            except Exception as exc:  # StreamingQueryException, Py4JJavaError, ...
                if stopping():  # SIGTERM reached the JVM too; it stopped on its own
                    self._set("stopped")
                    return 0
                error = summarize(exc)
            ran_s = self.clock() - started
            if ran_s >= self.backoff.healthy_s:
                failures = 0
            failures += 1
            self.last_error = error
            if self.max_restarts and self.restarts >= self.max_restarts:
                self._set("failed")
                raise QueryFailedError(f"the queues query failed: {error} (after"
                                       f" {self.restarts} restart(s); --max-restarts"
                                       f" {self.max_restarts})")
            delay = self.backoff.delay(failures)
            self.restarts += 1
            self.last_restart_ms = self.wall_ms()
            # the console's format puts the message inside a JSON string: escape, no quotes
            log.warning("queues query failed; restart=%d backoff_s=%.1f ran_s=%.1f error=%s",
                        self.restarts, delay, ran_s, json.dumps(error)[1:-1])
            self._set("backoff")
            try:
                recover(error)
            except TidemarkError:
                self._set("failed")
                raise
            if self._wait(delay, stopping):
                self._set("stopped")
                return 0
            self._set("starting")

    def _wait(self, seconds: float, stopping: Callable[[], bool]) -> bool:
        """Wait ``seconds`` in short steps; True as soon as a stop is requested."""
        deadline = self.clock() + seconds
        while not stopping():
            left = deadline - self.clock()
            if left <= 0:
                return False
            self.sleep(min(0.2, left))
        return True
