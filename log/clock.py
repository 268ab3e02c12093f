"""The wall clock replica nodes and the cluster's signed calls read, in one place.

Every wall-clock reading of a node (its gossip state's timestamp, the check that refuses a
state stamped in the future, pin leases, release ages, ingest times, dead-letter and repair
records) goes through :func:`now_ms`. ``TIDEMARK_CLOCK_SKEW_MS`` moves it, read once at
import: the nemesis starts a node with a skewed clock that way (``make nemesis``). An
``LD_PRELOAD`` of libfaketime cannot do it for a Python 3.11 process here: with monotonic
clocks left alone its ``clock_nanosleep`` makes ``time.sleep`` fail with EINVAL, and with
them faked, timed waits hang. Durations are measured with ``time.monotonic`` and stay true;
TLS certificate checks (gRPC's C core) read the operating system's clock.
"""

from __future__ import annotations

import time

from tidemark.log.registry import env_value

__all__ = ["now_ms", "skew_ms"]

_SKEW_MS: int = int(env_value("clock_skew_ms"))


def now_ms() -> int:
    """Milliseconds since the epoch on this process's wall clock (skewed for a drill)."""
    return int(time.time() * 1000) + _SKEW_MS


def skew_ms() -> int:
    """How far :func:`now_ms` is moved from the system clock (0 outside fault drills)."""
    return _SKEW_MS
