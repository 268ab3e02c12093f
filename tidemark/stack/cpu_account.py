"""Where the CPU went during a measurement: the core-seconds each process of the local stack
(and the measuring process itself) used between :meth:`CpuAccount.start` and
:meth:`CpuAccount.stop`, beside the whole machine's.

On a machine that runs the brokers, the replica nodes and the client together, a client's
rate is set as much by what the other processes take as by its own code; a benchmark
that prints this split says which. Linux only (``/proc``); elsewhere the figures are None.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from tidemark.log.exceptions import TidemarkError
from tidemark.stack.settle import cpu_times

__all__ = ["CpuAccount", "process_cpu_s", "stack_pids"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (all its threads), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None


class CpuAccount:
    """Core-seconds per named group of pids over a window (see the module doc)."""

    def __init__(self, groups: Mapping[str, Mapping[str, int]]) -> None:
        #: ``{group: {process name: pid}}``, e.g. ``{"replicas": {"p0r0": 123}}``
        self.groups = {g: dict(procs) for g, procs in groups.items()}
        self._start: dict[int, float | None] = {}
        self._used: dict[int, float | None] = {}
        self._machine0 = self._machine = 0.0
        self._t0 = self.window_s = 0.0

    def _pids(self) -> list[int]:
        return [pid for procs in self.groups.values() for pid in procs.values()]

    def start(self) -> None:
        """Open the window."""
        self._start = {pid: process_cpu_s(pid) for pid in self._pids()}
        self._machine0 = _machine_s()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        """Close the window."""
        self.window_s = time.perf_counter() - self._t0
        self._machine = _machine_s() - self._machine0
        for pid, before in self._start.items():
            after = process_cpu_s(pid)
            self._used[pid] = None if before is None or after is None else after - before

    def used(self, group: str, only: str | None = None, but: str | None = None
             ) -> float | None:
        """Core-seconds of ``group`` in the window (``only`` one process of it, or all
        ``but`` one); None if a process could not be read, or the group has none (e.g.
        brokers that are not processes of the local stack)."""
        procs = self.groups.get(group, {})
        if not procs:
            return None
        total = 0.0
        for name, pid in procs.items():
            if (only is not None and name != only) or (but is not None and name == but):
                continue
            v = self._used.get(pid)
            if v is None:
                return None
            total += v
        return total

    def report(self, parts: Mapping[str, float | None], messages: int) -> dict[str, Any]:
        """``parts`` (core-seconds by name) with the machine's total and the rest (what no
        part accounts for), each also in microseconds per message and in cores."""
        known = {k: v for k, v in parts.items() if v is not None}
        rows: dict[str, float | None] = {**parts, "machine": self._machine,
                                         "rest": self._machine - sum(known.values())}
        span = max(self.window_s, 1e-9)
        return {"window_s": round(self.window_s, 2),
                "core_s": {k: _r(v, 2) for k, v in rows.items()},
                "cores": {k: _r(None if v is None else v / span, 2) for k, v in rows.items()},
                "us_per_msg": {k: _r(None if v is None or not messages else
                                     v / messages * 1e6, 2) for k, v in rows.items()}}


def stack_pids(state_dir: str | None, kind: str) -> dict[str, int]:
    """Pids of the local stack's ``kind`` processes (``replica``, ``broker``) in
    ``state_dir``, by name (empty when there is no local stack there)."""
    from tidemark.stack.launcher import LocalStack
    try:
        stack = LocalStack(state_dir)
    except TidemarkError:
        return {}
    return {s.name: s.pid for s in stack.processes(kind) if s.pid and stack.alive(s)}


def _machine_s() -> float:
    """Busy CPU seconds of the whole machine so far."""
    try:
        return cpu_times()[0] / _TICK
    except (OSError, ValueError, IndexError):
        return 0.0


def _r(v: float | None, nd: int) -> float | None:
    return None if v is None else round(v, nd)
