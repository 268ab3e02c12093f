"""`tidemark local settle`: the quiet-machine wait before a measurement."""

from __future__ import annotations

import os
import subprocess
import sys

from tidemark.stack.settle import busy_cores, wait_quiet


def test_busy_cores_is_within_the_machine() -> None:
    busy = busy_cores(0.2)
    assert 0.0 <= busy <= (os.cpu_count() or 1) + 0.01


def test_quiet_when_the_threshold_cannot_be_missed() -> None:
    settled = wait_quiet(threshold=(os.cpu_count() or 1) + 1, timeout_s=5, window_s=0.1)
    assert settled.quiet and settled.waited_s < 5


def test_gives_up_at_the_timeout_and_says_so() -> None:
    settled = wait_quiet(threshold=-1.0, timeout_s=0.5, window_s=0.1)
    assert not settled.quiet and settled.waited_s >= 0.5
    assert "NOT quiet" in settled.describe(-1.0)


def test_cli_prints_one_line_and_exits_0() -> None:
    out = subprocess.run([sys.executable, "-m", "tidemark", "local", "settle", "--cores", "-1",
                          "--timeout", "0.1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("machine NOT quiet"), out.stdout


def test_cpu_pressure_is_a_percentage_or_unknown() -> None:
    from tidemark.stack.settle import cpu_pressure
    value = cpu_pressure()
    if os.path.exists("/proc/pressure/cpu"):
        assert value is not None and 0.0 <= value <= 100.0
    else:
        assert value is None


def test_a_window_measures_its_own_pressure_and_steal() -> None:
    from tidemark.stack.settle import measure
    cores = os.cpu_count() or 1
    window = measure(0.2)
    assert 0.0 <= window.steal <= cores + 0.01
    assert window.busy + window.steal <= cores + 0.05
    if os.path.exists("/proc/pressure/cpu"):
        assert window.pressure is not None and 0.0 <= window.pressure <= 100.0
    settled = wait_quiet(threshold=cores + 1, timeout_s=5, window_s=0.1)
    assert "stolen by the host" in settled.describe(cores + 1)
