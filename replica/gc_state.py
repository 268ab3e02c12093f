"""Where GC of one txlog partition stands (the ``G k`` key), and when its pending Sends are
swept: pure decisions on a :class:`GcState`, stored by :mod:`tidemark.replica.release_policy`.

GC visits each record once, from a cursor. A Send whose Ack or Purge is not below the GC
point yet stays where it is, below the cursor: it is *pending*, and nothing is written for
it. Pending Sends are decided again by a *sweep*: a pass over the records left between
``low`` (the lowest one the last sweep kept) and the cursor as it was when the sweep
started (its ``horizon``). A sweep is only worth running once an Ack or a Purge has been
visited since the last one started (``dirty``). Sweeps start at most every
``sweep_interval_ms``, and a sweep that took ``t`` (its passes are spread out by the GC
thread's share of the time) is followed by at least ``2 t`` without one: a large pending set
(a peer down for long, its queue growing) costs a bounded share of a node, not a sweep
after sweep.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["REST", "GcState", "state_key", "encode_state", "decode_state", "sweep_due",
           "start_sweep", "finish_sweep"]

_H = struct.Struct(">H")
_OLD = struct.Struct(">qqq")          # cursor, blocked_at, blocked_ms (before sweeps)
_STATE = struct.Struct(">8q??qq")
REST = 2  # a sweep that took t is followed by at least REST * t without one


@dataclass
class GcState:
    """GC of one partition: records below ``cursor`` are decided (released, or pending
    until a sweep); ``blocked_at`` is the young record the cursor waits at, met at
    ``blocked_ms``.

    The sweep: ``sweep_at`` is the next offset it reads (-1: no sweep running) up to
    ``horizon``; ``kept`` is the first record it kept (-1: none yet), the next sweep's
    ``low``. ``swept`` is the horizon of the last finished sweep: every pending Send below
    it has been checked against every Ack and Purge visited before that sweep started, so
    their index entries may go. ``dirty``: an Ack or Purge was visited since the last sweep
    started, at ``started_ms``; the last finished sweep took ``took_ms``. ``legacy``: the
    store may still hold the pending index of the version before sweeps."""

    cursor: int = 0
    blocked_at: int = -1
    blocked_ms: int = 0
    low: int = 0
    sweep_at: int = -1
    horizon: int = 0
    kept: int = -1
    swept: int = 0
    dirty: bool = False
    started_ms: int = 0
    took_ms: int = 0
    legacy: bool = False

    @property
    def sweeping(self) -> bool:
        """Whether a sweep is running."""
        return self.sweep_at >= 0


def state_key(partition: int) -> bytes:
    """The key of a partition's GC state."""
    return b"G" + _H.pack(partition)


def encode_state(s: GcState) -> bytes:
    """The stored form of ``s``."""
    return _STATE.pack(s.cursor, s.blocked_at, s.blocked_ms, s.low, s.sweep_at, s.horizon,
                       s.kept, s.swept, s.dirty, s.legacy, s.started_ms, s.took_ms)


def decode_state(raw: bytes | None) -> GcState:
    """The state stored as ``raw``: a fresh one if None. A state written before sweeps
    existed comes back dirty, so its pending Sends get a sweep, and legacy."""
    if not raw:
        return GcState()
    if len(raw) == _OLD.size:
        cursor, blocked_at, blocked_ms = _OLD.unpack(raw)
        return GcState(cursor, blocked_at, blocked_ms, dirty=True, legacy=True)
    (cursor, blocked_at, blocked_ms, low, sweep_at, horizon, kept, swept, dirty, legacy,
     started_ms, took_ms) = _STATE.unpack(raw)
    return GcState(cursor, blocked_at, blocked_ms, low, sweep_at, horizon, kept, swept, dirty,
                   started_ms, took_ms, legacy)


def sweep_due(s: GcState, now_ms: int, interval_ms: int) -> bool:
    """Whether a sweep should start now: none is running, an Ack or a Purge was visited
    since the last one started (else nothing pending can have become releasable), there is
    something below the cursor to read, and both ``interval_ms`` since the last start and
    ``REST`` times the last sweep's duration since its end have passed."""
    return (not s.sweeping and s.dirty and s.cursor > s.low
            and now_ms - s.started_ms >= max(interval_ms, (REST + 1) * s.took_ms))


def start_sweep(s: GcState, now_ms: int) -> None:
    """Start a sweep over ``[low, cursor)``."""
    s.sweep_at, s.horizon, s.kept = s.low, s.cursor, -1
    s.dirty, s.started_ms = False, now_ms


def finish_sweep(s: GcState, now_ms: int) -> None:
    """The sweep reached its horizon: the next one starts at the first record it kept."""
    s.low = s.kept if s.kept >= 0 else s.horizon
    s.swept, s.sweep_at, s.kept = s.horizon, -1, -1
    s.took_ms = max(0, now_ms - s.started_ms)
