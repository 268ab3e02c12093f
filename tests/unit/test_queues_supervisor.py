"""The queues job's supervision loop (:class:`tidemark.spark_streaming.supervisor.Supervisor`) with fake
queries and a fake clock: restarts, backoff and its reset, the limit, the session check, stops,
and the status file. The real query under a killed Python worker is
tests/fault/test_spark_worker_kill.py."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from tidemark.log.exceptions import ConfigError
from tidemark.spark_streaming.exceptions import QueryFailedError
from tidemark.spark_streaming.supervisor import Backoff, Supervisor, read_status, summarize


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class StreamingQueryException(Exception):
    """Named like pyspark's."""


class FakeQuery:
    """Runs ``ticks`` checks, then fails with ``error`` (raised by awaitTermination, as pyspark
    does, or reported by exception() when ``raises`` is False); None: runs until stopped."""

    def __init__(self, clock: Clock, ticks: int | None, error: str | None = "boom",
                 raises: bool = True) -> None:
        self.clock, self.ticks, self.error, self.raises = clock, ticks, error, raises
        self.stopped = False

    def awaitTermination(self, timeout: float) -> bool:  # noqa: N802 - pyspark API
        self.clock.now += timeout
        if self.ticks is None:
            return False
        self.ticks -= 1
        if self.ticks > 0:
            return False
        if self.error is not None and self.raises:
            raise StreamingQueryException(f"[STREAM_FAILED] {self.error}\n\tat somewhere")
        return True

    def exception(self) -> Any:
        return StreamingQueryException(self.error) if self.error else None

    def stop(self) -> None:
        self.stopped = True


class Harness:
    def __init__(self, tmp_path: Path, queries: list[Any], max_restarts: int = 0,
                 backoff: Backoff | None = None) -> None:
        self.clock = Clock()
        self.queries = list(queries)
        self.started: list[Any] = []
        self.recovered: list[str] = []
        self.stop_after: int | None = None  # request a stop once this many queries started
        self.stop_at: float | None = None   # ... or at this clock time
        self.status = tmp_path / "spark" / "supervisor.json"
        self.sup = Supervisor(self.status, backoff or Backoff(), max_restarts,
                              clock=self.clock, sleep=self.clock.sleep, wall_ms=lambda: 42)

    def start(self) -> Any:
        item = self.queries.pop(0)
        if isinstance(item, BaseException):
            raise item
        self.started.append(item)
        return item

    def stopping(self) -> bool:
        if self.stop_after is not None and len(self.started) >= self.stop_after:
            return True
        return self.stop_at is not None and self.clock.now >= self.stop_at

    def run(self, recover: Any = None) -> int:
        return self.sup.run(self.start, stopping=self.stopping,
                            recover=recover or self.recovered.append,
                            stop=lambda q: q.stop(), ready=lambda q: None)


def test_backoff_doubles_to_its_cap() -> None:
    b = Backoff()
    assert [b.delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 30, 30, 30]
    assert b.delay(10_000) == 30


def test_failed_queries_are_restarted_with_backoff_until_a_stop(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(tmp_path, [])
    h.queries = [FakeQuery(h.clock, 3, "first"), FakeQuery(h.clock, 2, "second", raises=False),
                 FakeQuery(h.clock, 1, "third"), FakeQuery(h.clock, None)]
    h.stop_after = 4
    with caplog.at_level(logging.WARNING, logger="spark_streaming.job"):
        assert h.run() == 0
    assert len(h.started) == 4 and h.started[-1].stopped
    assert h.sup.restarts == 3
    assert h.recovered == ["[STREAM_FAILED] first", "second", "[STREAM_FAILED] third"]
    assert sum(h.clock.slept) == pytest.approx(1 + 2 + 4) and max(h.clock.slept) <= 0.2
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == ('queues query failed; restart=1 backoff_s=1.0 ran_s=1.5'
                        ' error=[STREAM_FAILED] first')
    assert "restart=2 backoff_s=2.0" in lines[1] and "restart=3 backoff_s=4.0" in lines[2]
    status = read_status(h.status)
    assert status == {"pid": os.getpid(), "state": "stopped", "restarts": 3,
                      "last_error": "[STREAM_FAILED] third", "last_restart_ms": 42,
                      "counters": {}}


def test_counters_reach_the_status_file_when_they_change(tmp_path: Path) -> None:
    from tidemark.spark_streaming.supervisor import Supervisor
    path = tmp_path / "supervisor.json"
    sup = Supervisor(path)
    sup.set_counters({"poison": 0, "refused_environment": 1, "refused_signature": 2})
    assert read_status(path)["counters"] == {"poison": 0, "refused_environment": 1,
                                             "refused_signature": 2}
    path.unlink()
    sup.set_counters({"poison": 0, "refused_environment": 1, "refused_signature": 2})
    assert not path.exists()  # unchanged: not rewritten


def test_a_healthy_run_resets_the_backoff(tmp_path: Path) -> None:
    h = Harness(tmp_path, [], backoff=Backoff(healthy_s=60))
    h.queries = [FakeQuery(h.clock, 1), FakeQuery(h.clock, 1), FakeQuery(h.clock, 200),
                 FakeQuery(h.clock, 1), FakeQuery(h.clock, None)]
    h.stop_after = 5
    assert h.run() == 0
    assert sum(h.clock.slept) == pytest.approx(1 + 2 + 1 + 2)  # 100 s healthy, then 1 again
    assert h.sup.restarts == 4


def test_the_failure_after_max_restarts_is_the_error(tmp_path: Path) -> None:
    h = Harness(tmp_path, [], max_restarts=2)
    h.queries = [FakeQuery(h.clock, 1, f"failure {i}") for i in range(3)]
    with pytest.raises(QueryFailedError, match=r"failure 2 \(after 2 restart\(s\)"):
        h.run()
    assert h.sup.restarts == 2
    assert json.loads(h.status.read_text())["state"] == "failed"


def test_a_failure_to_start_is_restarted_but_not_a_config_error(tmp_path: Path) -> None:
    h = Harness(tmp_path, [])
    h.queries = [RuntimeError("Py4JJavaError: no broker"), FakeQuery(h.clock, None)]
    h.stop_after = 1
    assert h.run() == 0
    assert h.sup.restarts == 1 and h.sup.last_error == "Py4JJavaError: no broker"
    h2 = Harness(tmp_path, [ConfigError("no bootstrap")])
    with pytest.raises(ConfigError):
        h2.run()
    assert h2.sup.restarts == 0


def test_a_dead_session_ends_the_job(tmp_path: Path) -> None:
    h = Harness(tmp_path, [])
    h.queries = [FakeQuery(h.clock, 1, "Python worker failed to connect back")]

    def recover(error: str) -> None:
        raise QueryFailedError(f"the queues query failed and the Spark JVM is gone: {error}")

    with pytest.raises(QueryFailedError, match="JVM is gone"):
        h.run(recover)
    assert read_status(h.status)["state"] == "failed"  # type: ignore[index]


def test_a_stop_during_the_backoff_returns_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path, [], backoff=Backoff(first_s=30))
    h.queries = [FakeQuery(h.clock, 1), FakeQuery(h.clock, None)]
    h.stop_at = h.clock.now + 2.0
    assert h.run() == 0
    assert len(h.started) == 1 and sum(h.clock.slept) < 2
    assert read_status(h.status)["state"] == "stopped"  # type: ignore[index]


def test_a_failure_while_stopping_is_a_clean_stop(tmp_path: Path) -> None:
    h = Harness(tmp_path, [])
    h.queries = [FakeQuery(h.clock, 1)]
    h.stop_at = h.clock.now + 0.5  # SIGTERM reached the JVM as well: the query failed
    assert h.run() == 0 and h.sup.restarts == 0


def test_a_query_stopped_elsewhere_ends_the_run(tmp_path: Path) -> None:
    h = Harness(tmp_path, [])
    h.queries = [FakeQuery(h.clock, 2, None)]
    assert h.run() == 0 and h.sup.restarts == 0


#: The shape of a real failure (a killed Python worker), shortened.
KILLED_WORKER = (
    "[STREAM_FAILED] Query [id = 53a3c3ba-30f5-4073-8099-5ff3f1018ff1, runId ="
    " 350c8bdf-20ca-4188-a92f-288a4bca7a73] terminated with exception:"
    " [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in"
    " foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message:"
    " Traceback (most recent call last):\n"
    '  File "sink.py", line 125, in __call__\n'
    "py4j.protocol.Py4JJavaError: An error occurred while calling o135.getResult.\n"
    ": org.apache.spark.SparkException: Exception thrown in awaitResult: \n"
    "\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:53)\n"
    "Caused by: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in"
    " stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 10)"
    " (192.0.2.2 executor driver): org.apache.spark.SparkException: Python worker exited"
    " unexpectedly (crashed). Consider setting 'spark.python.worker.faulthandler.enabled'\n"
    "\tat org.apache.spark.api.python.BasePythonRunner(PythonRunner.scala:621)\n")


def test_the_error_summary_names_the_failed_task() -> None:
    assert summarize(KILLED_WORKER) == (
        "[STREAM_FAILED] Query terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR]"
        " An error occurred in the user provided function in foreach batch sink. Reason: An"
        " exception was raised by the Python Proxy.; task failure: SparkException: Python"
        " worker exited unexpectedly (crashed)")
    assert summarize(ValueError("plain\nmore")) == "plain"
    assert summarize(RuntimeError()) == "RuntimeError"


def test_local_status_shows_the_restarts_of_the_running_job(tmp_path: Path) -> None:
    from tidemark.stack.launcher import LocalStack
    ready = tmp_path / "spark" / "query-running"
    (tmp_path / "state.json").write_text(json.dumps({"bootstrap": "", "processes": {"spark": {
        "name": "spark", "kind": "spark", "argv": [str(tmp_path)], "pid": os.getpid(),
        "ready_file": str(ready)}}}))
    assert LocalStack(tmp_path).status()["spark"]["restarts"] == 0  # no file yet
    ready.parent.mkdir()
    status = ready.with_name("supervisor.json")
    status.write_text(json.dumps({"pid": os.getpid(), "restarts": 2}))
    assert LocalStack(tmp_path).status()["spark"]["restarts"] == 2
    status.write_text(json.dumps({"pid": os.getpid() + 1, "restarts": 2}))  # another process
    assert LocalStack(tmp_path).status()["spark"]["restarts"] == 0
