"""Per-peer queue state, pure logic (no Spark): apply txlog events, emit upserts/tombstones.

A peer's state is the set of its unacked message ids (with the txlog offset of the Send that
queued each), plus *remembered* ids, each with an expiry. A Send whose id is queued or still
remembered is ignored, so an early Ack cancels the later Send and a duplicate Send counts once.

* An Ack of a message that is not queued (an *early ack*: the direct path beat the log) is
  remembered for ``ack_ttl_ms``.
* An Ack of a queued message, and every message a Purge drops, is remembered only for the
  shorter ``dedup_window_ms``, which catches a duplicate Send arriving after the Ack. Acked
  messages therefore leave the state: it grows with what is unacked (plus a window of recent
  acks), not with the total history.

Time is the peer's own log time: ``clock`` is the largest ``timestamp_ms`` of any record of
the peer applied so far; a remembered id expires once ``clock >= expiry``. Because the clock
only depends on the records, the outcome is the same however the stream is cut into batches,
which is what makes a restarted job converge to the same queues.

:func:`apply_events` returns the *net* changes of one batch: one :class:`Change` per message
whose presence in the queue differs between the start and the end of the batch. Each output
key therefore appears at most once per batch, so the order of the rows within a batch does
not matter, and writing the same batch twice is harmless (upserts and tombstones are
idempotent).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

__all__ = ["SEND", "ACK", "PURGE", "DEFAULT_ACK_TTL_MS", "DEFAULT_DEDUP_WINDOW_MS", "Event",
           "Change", "PeerState",
           "apply_events", "queue_key", "split_queue_key", "progress_key", "is_progress_key"]

SEND, ACK, PURGE = "Send", "Ack", "Purge"
#: How long (in the peer's log time) an early ack is remembered: 24 hours.
DEFAULT_ACK_TTL_MS = 24 * 3600 * 1000
#: How long an id acked after its Send, or purged, is remembered against duplicates: 10 min.
DEFAULT_DEDUP_WINDOW_MS = 10 * 60 * 1000

_SEP = "\x00"
_PROGRESS_PREFIX = "__progress__."


def queue_key(peer: str, message_id: str) -> str:
    """The ``queues`` key of a queue entry: ``peer``, NUL, ``message_id``."""
    return f"{peer}{_SEP}{message_id}"


def split_queue_key(key: str) -> tuple[str, str]:
    """``(peer, message_id)`` of a queue-entry key (raises ValueError on other keys)."""
    peer, sep, message_id = key.partition(_SEP)
    if not sep:
        raise ValueError(f"not a queue entry key: {key!r}")
    return peer, message_id


def progress_key(txlog_partition: int) -> str:
    """The ``queues`` key of partition ``txlog_partition``'s QueueProgress (never has a NUL)."""
    return f"{_PROGRESS_PREFIX}{txlog_partition}"


def is_progress_key(key: str) -> bool:
    """Whether ``key`` is a progress key rather than a queue entry key."""
    return _SEP not in key and key.startswith(_PROGRESS_PREFIX)


@dataclass(frozen=True)
class Event:
    """One decoded txlog record of a peer: kind, position, message id, time, Send fields."""

    kind: str
    offset: int
    timestamp_ms: int
    message_id: str = ""
    record: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Change:
    """A net change of a batch: ``upsert`` with the queuing Send, or a tombstone."""

    message_id: str
    upsert: bool
    send: Event | None = None


@dataclass
class PeerState:
    """One peer's state: queued ids -> Send offset, remembered ids -> expiry, the clock."""

    queue: dict[str, int] = field(default_factory=dict)
    remembered: dict[str, int] = field(default_factory=dict)
    clock: int = 0

    def is_remembered(self, message_id: str) -> bool:
        """Whether an Ack or Purge of ``message_id`` is still remembered at the current clock."""
        return self.remembered.get(message_id, self.clock) > self.clock

    def remember(self, message_id: str, for_ms: int) -> None:
        """Remember ``message_id`` until ``clock + for_ms`` (never shortening a longer one)."""
        until = self.clock + for_ms
        if self.remembered.get(message_id, until - 1) < until:
            self.remembered[message_id] = until

    def prune(self) -> int:
        """Forget expired remembered ids; returns how many were dropped."""
        expired = [m for m, until in self.remembered.items() if until <= self.clock]
        for m in expired:
            del self.remembered[m]
        return len(expired)

    @property
    def empty(self) -> bool:
        """Nothing queued and nothing remembered: the state can be dropped."""
        return not self.queue and not self.remembered

    def to_bytes(self) -> bytes:
        """A compact serialization for Spark's state store."""
        return json.dumps([self.clock, self.queue, self.remembered],
                          separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | None) -> "PeerState":
        """The inverse of :meth:`to_bytes` (``None`` gives an empty state)."""
        if not data:
            return cls()
        clock, queue, remembered = json.loads(data)
        return cls(queue=queue, remembered=remembered, clock=clock)


def apply_events(state: PeerState, events: Iterable[Event], ack_ttl_ms: int,
                 dedup_window_ms: int | None = None) -> list[Change]:
    """Apply ``events`` (in txlog offset order) to ``state`` in place; return net changes.

    ``dedup_window_ms`` defaults to ``ack_ttl_ms``. Changes are sorted by message id.
    Expired remembered ids are pruned at the end.
    """
    dedup_ms = ack_ttl_ms if dedup_window_ms is None else dedup_window_ms
    touched: dict[str, bool] = {}  # message id -> queued at the start of the batch
    queued_by: dict[str, Event] = {}
    queue = state.queue
    for ev in events:
        if ev.timestamp_ms > state.clock:
            state.clock = ev.timestamp_ms
        if ev.kind == SEND:
            mid = ev.message_id
            if mid in queue or state.is_remembered(mid):
                continue
            touched.setdefault(mid, False)
            queue[mid] = ev.offset
            queued_by[mid] = ev
        elif ev.kind == ACK:
            mid = ev.message_id
            if mid in queue:
                touched.setdefault(mid, True)
                del queue[mid]
                state.remember(mid, dedup_ms)
            else:
                state.remember(mid, ack_ttl_ms)
        elif ev.kind == PURGE:
            for mid in queue:
                touched.setdefault(mid, True)
                state.remember(mid, dedup_ms)
            queue.clear()
        else:
            raise ValueError(f"unknown event kind {ev.kind!r}")
    state.prune()
    changes = []
    for mid in sorted(touched):
        now = mid in queue
        if now and mid in queued_by:  # queued (or re-queued after its ack expired) here
            changes.append(Change(mid, True, queued_by[mid]))
        elif touched[mid] and not now:
            changes.append(Change(mid, False))
    return changes
