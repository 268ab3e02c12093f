"""Waiting for a quiet machine before a measurement: a benchmark's figure should not depend on
what the machine was still doing (brokers' JIT compilers after a start, replicas ingesting
the previous bench's records, another job)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tidemark.log.exceptions import ClusterLaunchError
from tidemark.stack.launcher import LocalStack

__all__ = ["Settled", "Window", "busy_cores", "cpu_times", "cpu_pressure", "measure",
           "wait_quiet", "jit_seconds", "broker_jit_probe"]


def cpu_times() -> tuple[float, float, float]:
    """(busy, total, steal) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    steal = fields[7] if len(fields) > 7 else 0.0
    return total - idle - steal, total, steal


def _psi_some(field: str) -> float | None:
    """One field (``avg10``, ``total``...) of Linux PSI's CPU ``some`` line, or None."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some "):
                    return float(dict(kv.split("=") for kv in line.split()[1:])[field])
    except (OSError, KeyError, ValueError):
        pass
    return None


@dataclass(frozen=True)
class Window:
    """What the machine did over one measurement window."""

    busy: float                #: cores kept busy by this machine's own tasks
    steal: float               #: cores' worth of time the host gave to something else
    pressure: float | None     #: % of the window some runnable task waited for a CPU (PSI)


def measure(window_s: float = 2.0) -> Window:
    """Busy cores, stolen time and CPU pressure over the next ``window_s`` seconds."""
    busy0, total0, steal0 = cpu_times()
    psi0, t0 = _psi_some("total"), time.monotonic()
    time.sleep(window_s)  # a measurement window, not a synchronization
    busy1, total1, steal1 = cpu_times()
    psi1, t1 = _psi_some("total"), time.monotonic()
    cores = os.cpu_count() or 1
    span = max(1e-9, total1 - total0)
    pressure = None
    if psi0 is not None and psi1 is not None:
        pressure = min(100.0, max(0.0, (psi1 - psi0) / max(1e-9, t1 - t0) / 1e4))
    return Window(cores * (busy1 - busy0) / span, cores * (steal1 - steal0) / span, pressure)


def busy_cores(window_s: float = 2.0) -> float:
    """How many cores the machine kept busy over the next ``window_s`` seconds."""
    return measure(window_s).busy


def cpu_pressure() -> float | None:
    """Share of the last 10 s in which some runnable task waited for a CPU (Linux PSI
    ``avg10``, in percent), or None where the kernel does not report it. It decays slowly:
    right after a load it still counts that load (see :func:`measure` for a window of
    one's own)."""
    return _psi_some("avg10")


@dataclass(frozen=True)
class Settled:
    """The outcome of :func:`wait_quiet`."""

    quiet: bool          #: whether the machine went below the threshold in time
    waited_s: float
    last: Window         #: the last window measured

    @property
    def busy(self) -> float:
        """Cores busy in the last window."""
        return self.last.busy

    def describe(self, threshold: float) -> str:
        """One line for a report."""
        verdict = "quiet" if self.quiet else f"NOT quiet (still above {threshold:g} cores)"
        line = (f"{verdict}: {self.busy:.2f} of {os.cpu_count()} cores busy after"
                f" {self.waited_s:.0f} s, load average "
                + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        # over the last window only: PSI's own avg10 still counts the previous load
        line += f", stolen by the host {self.last.steal:.2f} cores"
        if self.last.pressure is not None:
            line += (f", CPU pressure {self.last.pressure:.0f}% (PSI some over the last"
                     " window: time a runnable task waited for a CPU)")
        return line

    def misses(self, threshold: float) -> list[str]:
        """What ``local settle --check`` fails on: empty when quiet, else one phrase."""
        if self.quiet:
            return []
        return [f"machine NOT quiet after {self.waited_s:.0f} s: {self.busy:.2f} cores busy"
                f" (quiet is fewer than {threshold:g})"]

    def as_json(self, threshold: float) -> dict[str, object]:
        """The figures of :meth:`describe` as one JSON document (``local settle --json``)."""
        pressure = self.last.pressure
        return {"quiet": self.quiet, "threshold_cores": threshold,
                "busy_cores": round(self.busy, 2), "cores": os.cpu_count(),
                "waited_s": round(self.waited_s, 1),
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "steal_cores": round(self.last.steal, 2),
                "cpu_pressure_pct": None if pressure is None else round(pressure, 1)}


#: Quiet means fewer cores busy than this (``local settle --cores``, the benches' waits).
QUIET_CORES = 0.5


def wait_quiet(threshold: float = QUIET_CORES, timeout_s: float = 120.0, window_s: float = 2.0,
               progress: Callable[[str], None] = lambda m: None) -> Settled:
    """Wait until the machine keeps fewer than ``threshold`` cores busy over a window (two
    windows in a row), or until ``timeout_s``; never raises."""
    start = time.monotonic()
    below = 0
    last = measure(window_s)
    while True:
        below = below + 1 if last.busy < threshold else 0
        waited = time.monotonic() - start
        if below >= 2:
            return Settled(True, waited, last)
        if waited >= timeout_s:
            return Settled(False, waited, last)
        progress(f"waiting for a quiet machine: {last.busy:.2f} cores busy"
                 f" (< {threshold:g} wanted)")
        last = measure(window_s)


#: Thread names of the HotSpot JIT compilers, as /proc shows them (15 characters).
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def jit_seconds(pids: Iterable[int]) -> float:
    """CPU seconds the JIT compiler threads of the JVMs ``pids`` have used (from /proc; a
    process or thread that is gone counts 0)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
            if name in JIT_THREADS:
                parts = fields.split()
                total += int(parts[11]) + int(parts[12])  # utime, stime
    return total / tick


def broker_jit_probe(bootstrap: str, state_dir: str | os.PathLike[str] | None
                     ) -> Callable[[], float] | None:
    """A probe of the local stack's brokers' JIT compilers (for the producer benches'
    warm-up), or None when ``bootstrap`` is not that stack's (a cluster elsewhere)."""
    try:
        status = LocalStack(state_dir).status()
    except ClusterLaunchError:  # a corrupt state file: no probe, the warm-up goes by rates
        return None
    if not status["bootstrap"] or status["bootstrap"] != bootstrap:
        return None
    pids = [b["pid"] for b in status["brokers"] if b["pid"]]
    return (lambda: jit_seconds(pids)) if pids else None
