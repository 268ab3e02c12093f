"""The local stack waits for a process without a port until it creates its ready file
(real child processes; the Spark job does this once its streaming query runs)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tidemark.log.exceptions import ClusterLaunchError
from tidemark.stack.launcher import LocalStack, ProcessSpec
from tidemark.stack.processes import is_alive, kill9


def _spec(stack: LocalStack, name: str, code: str) -> ProcessSpec:
    ready = stack.state_dir / f"{name}.ready"
    return ProcessSpec(name, "spark", [sys.executable, "-c", code, str(stack.state_dir)],
                       ready_file=str(ready))


def test_ensure_returns_once_the_file_exists(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    spec = _spec(stack, "slow", "import sys, time, pathlib; time.sleep(1.0);"
                                " pathlib.Path(sys.argv[1], 'slow.ready').touch(); time.sleep(30)")
    started = time.monotonic()
    try:
        stack.ensure(spec, timeout_s=30)
        assert Path(spec.ready_file or "").exists() and time.monotonic() - started >= 0.9
        assert stack.processes()[0].ready_file == spec.ready_file  # recorded in state.json
    finally:
        kill9(spec.pid)


def test_a_process_that_exits_first_is_one_clear_error(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    spec = _spec(stack, "dies", "raise SystemExit(3)")
    started = time.monotonic()
    with pytest.raises(ClusterLaunchError, match=r"dies is not ready \(exited") as info:
        stack.ensure(spec, timeout_s=60)
    assert time.monotonic() - started < 30  # did not wait out the deadline
    assert "\n" not in str(info.value) and "dies.log" in str(info.value)


def test_a_file_left_by_an_earlier_run_does_not_count(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    spec = _spec(stack, "stale", "import time; time.sleep(30)")
    Path(spec.ready_file or "").write_text("")
    try:
        with pytest.raises(ClusterLaunchError, match="still starting"):
            stack.ensure(spec, timeout_s=1.5)
        assert is_alive(spec.pid)
    finally:
        kill9(spec.pid)
