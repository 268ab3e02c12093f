"""Waiting for a quiet machine before a measurement: a benchmark's figure should not depend on
what the machine was still doing (brokers' JIT compilers after a start, replicas ingesting
the previous bench's records, another job)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Settled", "busy_cores", "cpu_pressure", "wait_quiet"]


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def busy_cores(window_s: float = 2.0) -> float:
    """How many cores the machine kept busy over the next ``window_s`` seconds."""
    busy0, total0 = _cpu_times()
    time.sleep(window_s)  # a measurement window, not a synchronization
    busy1, total1 = _cpu_times()
    cores = os.cpu_count() or 1
    return cores * (busy1 - busy0) / max(1e-9, total1 - total0)


def cpu_pressure() -> float | None:
    """Share of the last 10 s in which some runnable task waited for a CPU (Linux PSI,
    ``/proc/pressure/cpu``, in percent), or None where the kernel does not report it. High
    pressure on an idle machine means the virtual CPUs are not getting the host's CPUs."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some "):
                    return float(dict(kv.split("=") for kv in line.split()[1:])["avg10"])
    except (OSError, KeyError, ValueError):
        pass
    return None


@dataclass(frozen=True)
class Settled:
    """The outcome of :func:`wait_quiet`."""

    quiet: bool          #: whether the machine went below the threshold in time
    busy: float          #: cores busy in the last window
    waited_s: float

    def describe(self, threshold: float) -> str:
        """One line for a report."""
        verdict = "quiet" if self.quiet else f"NOT quiet (still above {threshold:g} cores)"
        pressure = cpu_pressure()
        return (f"{verdict}: {self.busy:.2f} of {os.cpu_count()} cores busy after"
                f" {self.waited_s:.0f} s, load average "
                + " ".join(f"{x:.2f}" for x in os.getloadavg())
                + ("" if pressure is None else f", CPU pressure {pressure:.0f}% (PSI some,"
                   " 10 s: time a runnable task waited for a CPU)"))


def wait_quiet(threshold: float = 0.5, timeout_s: float = 120.0, window_s: float = 2.0,
               progress: Callable[[str], None] = lambda m: None) -> Settled:
    """Wait until the machine keeps fewer than ``threshold`` cores busy over a window (two
    windows in a row), or until ``timeout_s``; never raises."""
    start = time.monotonic()
    below = 0
    busy = busy_cores(window_s)
    while True:
        below = below + 1 if busy < threshold else 0
        waited = time.monotonic() - start
        if below >= 2:
            return Settled(True, busy, waited)
        if waited >= timeout_s:
            return Settled(False, busy, waited)
        progress(f"waiting for a quiet machine: {busy:.2f} cores busy (< {threshold:g} wanted)")
        busy = busy_cores(window_s)
