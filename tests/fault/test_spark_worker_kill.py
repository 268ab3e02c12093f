"""kill -9 of the queues job's Python workers under traffic: the job restarts its own query.

Under load a PySpark Python worker can die or fail to connect back; the task fails, and in
local mode that fails the streaming query (``[STREAM_FAILED]``). The job process must then start
the query again from its checkpoint by itself (spark_streaming/supervisor.py): no outside
restart (same process), a restart count in ``<state dir>/spark/supervisor.json`` and in
``local status``, and queues equal to the model computed from txlog.

The job runs as the local stack's ``spark`` process (``tidemark.stack.spark.plan``) in a stack
folder of this test's own that points at the session's cluster, like test_spark_kill.py. The
workers are found as the job's descendants running PySpark's daemon (here
``python -m spark_streaming.pydaemon``, ``spark.python.daemon.module``) or a forked worker of
it, and are killed while one of them is running a task (its CPU time moves), so that the kill
lands in the middle of a batch.

The query must progress again within 30 s of the kill. On a machine so saturated that the
job's own batches took longer than 10 s before the kill, the deadline is three such batches
instead: the test checks the supervision, not the machine.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support import BackgroundLoad, expected_queues, wait_for
from tidemark.log.offsets import end_offsets
from tidemark.log.topics import ensure_topics
from tidemark.spark_streaming.depth import ProgressTracker, read_queues
from tidemark.spark_streaming.supervisor import STATUS_NAME, read_status
from tidemark.stack.launcher import LocalStack
from tidemark.stack.processes import is_alive
from tidemark.stack.spark import plan

# in `make load` (about 60 s): make test stays under 25 minutes
pytestmark = [pytest.mark.spark, pytest.mark.fault, pytest.mark.load, pytest.mark.timeout(480)]

#: What marks a PySpark Python worker process on its command line (a Python interpreter's:
#: the JVM's own command line names the daemon module too, in its ``--conf``).
WORKER_MARKS = (b"tidemark.spark_streaming.pydaemon", b"spark_streaming/pydaemon.py", b"pyspark.daemon",
                b"pyspark.worker")
RECOVERY_S = 30.0


TOPIC_LETTER = "w"  # the topic prefix of this module's stack (tests/fault/conftest.py)


@pytest.fixture
def stack(external_stack: LocalStack) -> LocalStack:
    """The folder's external stack (tests/fault/conftest.py)."""
    return external_stack


def _processes() -> dict[int, tuple[int, bytes, int]]:
    """``pid: (parent pid, command line, CPU ticks)`` of every process we can read (the
    command line of Python interpreters only, else empty)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if stat[0] != b"Z":
            python = Path(argv[0].decode(errors="replace")).name.startswith("python")
            out[int(entry.name)] = (int(stat[1]), b" ".join(argv) if python else b"",
                                    int(stat[11]) + int(stat[12]))
    return out


def python_workers(job_pid: int) -> dict[int, tuple[int, int]]:
    """The job's PySpark daemon and worker processes: ``pid: (parent pid, CPU ticks)``."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, list(children.get(job_pid, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        ppid, cmdline, ticks = procs[pid]
        if any(mark in cmdline for mark in WORKER_MARKS):
            found[pid] = (ppid, ticks)
    return found


def _kill_busy_workers(job_pid: int, timeout: float) -> list[int]:
    """SIGKILL the daemon and its workers once a worker's CPU time moves (a task running in
    it); at the deadline, kill them anyway. Returns the pids killed."""
    deadline = time.monotonic() + timeout
    before = python_workers(job_pid)
    while True:
        now = python_workers(job_pid)
        daemons = {p for p, (ppid, _) in now.items() if ppid not in now}
        busy = [p for p, (ppid, ticks) in now.items()
                if p not in daemons and p in before and ticks > before[p][1]]
        if now and (busy or time.monotonic() > deadline):
            for pid in now:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return sorted(now)
        before = now
        time.sleep(0.02)  # the CPU-time sampling period


def _moved(tracker: ProgressTracker, before: dict[int, int]) -> bool:
    """Whether the job wrote progress past ``before`` on some txlog partition."""
    return any(o > before.get(p, 0) for p, o in tracker.poll().items())


def test_python_worker_kill_under_traffic_recovers_in_process(stack: LocalStack) -> None:
    settings = stack.settings()
    assert settings.topic_prefix.startswith("w") and settings.partitions == 4
    ensure_topics(settings)
    spec = plan(stack)[0]
    stack.ensure(spec, timeout_s=300)  # returns once the query runs (its ready file)
    job_pid = stack.status()["spark"]["pid"]
    status_file = Path(spec.ready_file or "").with_name(STATUS_NAME)
    log_file = stack.state_dir / "logs" / "spark.log"

    def log_tail() -> str:
        return "\n".join(log_file.read_text(errors="replace").splitlines()[-40:])

    def job_alive() -> bool:
        return is_alive(job_pid, stack.marker)

    assert (read_status(status_file) or {}).get("restarts") == 0, log_tail()
    load = BackgroundLoad(settings, peers=25, messages=150, pause_s=0.3).start()  # ~300 Sends/s
    tracker = ProgressTracker(settings)
    try:
        seen: list[tuple[float, dict[int, int]]] = []

        def batches(count: int) -> bool:  # records when the job's progress changes
            progress = dict(tracker.poll())
            if progress and (not seen or progress != seen[-1][1]):
                seen.append((time.monotonic(), progress))
            return len(seen) >= count

        wait_for(lambda: batches(3), timeout=240, what="three progress updates before the kill")
        batch_s = max(b[0] - a[0] for a, b in zip(seen, seen[1:], strict=False))
        budget = max(RECOVERY_S, 3 * batch_s)  # RECOVERY_S unless the machine is saturated
        wait_for(lambda: python_workers(job_pid), timeout=60, what="the job's Python workers")
        assert load.running, load.errors

        killed: list[int] = []
        rounds, killed_at, at_kill = 0, time.monotonic(), dict(tracker.poll())
        # A kill between two tasks may be absorbed by Spark (it restarts its daemon); kill
        # busy workers until the query failed once (at most three rounds).
        while rounds < 3 and not (read_status(status_file) or {}).get("restarts"):
            rounds += 1
            pids = _kill_busy_workers(job_pid, timeout=60)
            killed_at = time.monotonic()
            killed += pids
            at_kill = dict(tracker.poll(1.0))  # the killed batch writes no progress
            wait_for(lambda pids=pids: not any(is_alive(p) for p in pids), timeout=10,
                     what="the killed workers to be gone")
            # until the job counted a restart, or it visibly went on without one
            wait_for(lambda at_kill=at_kill: (read_status(status_file) or {}).get("restarts")
                     or not job_alive() or _moved(tracker, at_kill),
                     timeout=budget, what="a restart, or progress past the kill")
            assert job_alive(), f"the job process exited after the kill:\n{log_tail()}"

        # Recovery: with traffic still going on, the query progresses again within the budget
        # (RECOVERY_S) of the (last) kill, in the same process.
        wait_for(lambda: _moved(tracker, at_kill) or not job_alive(),
                 timeout=max(1.0, budget - (time.monotonic() - killed_at)),
                 what="progress past the kill point")
        recovered_s = time.monotonic() - killed_at
        assert job_alive(), f"the job process exited after the kill:\n{log_tail()}"
        assert _moved(tracker, at_kill), log_tail()
    finally:
        load_ok = load.stop()
        tracker.close()
    assert load_ok, load.errors

    # Once traffic stops, progress covers txlog's end, and the queues equal the model.
    ends, stopped_at = end_offsets(settings, "txlog"), time.monotonic()
    wait_for(lambda: read_queues(settings).covers({p: e for p, e in ends.items() if e})
             or not job_alive(), timeout=180, interval=1.0, what="progress covering txlog's end")
    caught_up_s = time.monotonic() - stopped_at
    assert job_alive(), log_tail()
    status = stack.status()["spark"]
    assert status["pid"] == job_pid and status["up"] is True  # no outside restart
    supervisor = read_status(status_file) or {}
    assert supervisor.get("pid") == job_pid and supervisor.get("state") == "running"
    restarts = supervisor["restarts"]
    assert restarts >= 1, f"no kill failed the query in {rounds} rounds:\n{log_tail()}"
    assert status["restarts"] == restarts
    assert supervisor["last_error"] and supervisor["last_restart_ms"]
    text = log_file.read_text(errors="replace")
    for n in range(1, restarts + 1):
        assert f"queues query failed; restart={n} " in text
    expected, final_ends, bad = expected_queues(settings)
    view = read_queues(settings)
    assert bad == 0
    assert view.queues == expected  # nothing missing, nothing stale
    assert view.total == load.totals["sent"] - load.totals["acked"]
    assert view.covers({p: e for p, e in final_ends.items() if e})
    print(f"\nkilled {len(killed)} Python worker process(es) in {rounds} round(s); the query"
          f" restarted {restarts}x and progressed {recovered_s:.1f}s after the kill (budget"
          f" {budget:.0f}s; batches took up to {batch_s:.1f}s before it), covered"
          f" txlog's end {caught_up_s:.1f}s after the traffic stopped;"
          f" {load.totals['sent']} sends, {load.totals['acked']} acks; last error:"
          f" {supervisor['last_error'][:160]}")
