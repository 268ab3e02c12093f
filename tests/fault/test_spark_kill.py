"""kill -9 of the queues job mid-stream: restarted from its checkpoint, it converges exactly.

The job runs as the local stack's ``spark`` process (``tidemark.stack.spark.plan``), in a
stack folder of this test's own that points at the session's cluster, so ``LocalStack.kill``
and ``status`` are exercised as ``tidemark local kill spark`` / ``local status`` use them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import BackgroundLoad, expected_queues, wait_for
from tidemark.log.topics import ensure_topics
from tidemark.spark_streaming.depth import ProgressTracker, read_queues, wait_for_progress
from tidemark.stack.launcher import LocalStack
from tidemark.stack.spark import plan

# in `make load` (about 100 s): make test stays under 25 minutes
pytestmark = [pytest.mark.spark, pytest.mark.fault, pytest.mark.load, pytest.mark.timeout(420)]


TOPIC_LETTER = "k"  # the topic prefix of this module's stack (tests/fault/conftest.py)


@pytest.fixture
def stack(external_stack: LocalStack) -> LocalStack:
    """The folder's external stack (tests/fault/conftest.py)."""
    return external_stack




def _batch_in_flight(checkpoint: Path) -> bool:
    """A micro-batch was planned (offsets/N written) but not committed (no commits/N)."""
    def ids(folder: str) -> set[int]:
        return {int(f.name) for f in (checkpoint / folder).glob("[0-9]*")}
    planned, committed = ids("offsets"), ids("commits")
    return bool(planned) and max(planned) not in committed


def test_sigkill_mid_stream_then_restart_converges(stack: LocalStack) -> None:
    settings = stack.settings()
    assert settings.topic_prefix.startswith("k") and settings.partitions == 4
    ensure_topics(settings)
    spec = plan(stack)[0]
    assert spec.kind == "spark" and str(stack.state_dir) in " ".join(spec.argv)
    stack.ensure(spec, timeout_s=300)  # returns once the query runs (its ready file)
    assert Path(spec.ready_file or "").exists()
    load = BackgroundLoad(settings, peers=30, messages=1500, pause_s=1.0).start()  # across the kill
    tracker = ProgressTracker(settings)
    _progress = tracker.poll
    wait_for(lambda: sum(_progress().values()) > 0, timeout=120,
             what="the job's first progress records")
    checkpoint = Path(spec.argv[spec.argv.index("--checkpoint") + 1])
    wait_for(lambda: _batch_in_flight(checkpoint), timeout=60, interval=0.05,
             what="a micro-batch in flight")
    assert load.running, load.errors
    stack.kill("spark")  # in the middle of a batch: its rows may be partly written
    wait_for(lambda: stack.status()["spark"]["up"] is False, timeout=20,
             what="`local status` to report the killed job down")
    killed_at = read_queues(settings).progress  # everything written before the kill
    stack.ensure(plan(stack)[0], timeout_s=300)  # as `local up` does for a dead process
    assert stack.status()["spark"]["up"] is True
    wait_for(lambda: any(o > killed_at.get(p, 0) for p, o in _progress().items()),
             timeout=180, what="progress past the kill point after the restart")
    load_ok = load.stop()
    assert load_ok, load.errors
    tracker.close()
    wait_for_progress(settings, 240)
    expected, ends, bad = expected_queues(settings)
    view = read_queues(settings)
    assert bad == 0
    assert view.queues == expected  # nothing missing, nothing stale
    assert view.total == load.totals["sent"] - load.totals["acked"]
    assert all(view.progress[p] >= killed_at.get(p, 0) for p in view.progress)
    assert view.covers({p: e for p, e in ends.items() if e})
