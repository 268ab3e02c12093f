"""Per-peer queue state, pure logic (no Spark): apply txlog events, emit upserts/tombstones.

A peer's state is the set of its unacked message ids (with the txlog offset of the Send that
queued each), plus *remembered* ids: messages that were acked (before or after their Send) or
purged. A Send whose id is queued or remembered is ignored, so an early Ack cancels the later
Send and a duplicate Send counts once.

Time is the peer's own log time: ``clock`` is the largest ``timestamp_ms`` of any record of
the peer applied so far. An id is remembered at the clock value of the Ack or Purge that
dropped it and is forgotten once ``clock >= remembered_at + ttl_ms``. Because the clock only
depends on the records, the outcome is the same however the stream is cut into batches, which
is what makes a restarted job converge to the same queues.

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

__all__ = ["SEND", "ACK", "PURGE", "DEFAULT_ACK_TTL_MS", "Event", "Change", "PeerState",
           "apply_events", "queue_key", "split_queue_key", "progress_key", "is_progress_key"]

SEND, ACK, PURGE = "Send", "Ack", "Purge"
#: How long (in the peer's log time) an acked or purged id is remembered: 24 hours.
DEFAULT_ACK_TTL_MS = 24 * 3600 * 1000

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
    """One peer's state: queued ids -> Send offset, remembered ids -> clock, the clock."""

    queue: dict[str, int] = field(default_factory=dict)
    remembered: dict[str, int] = field(default_factory=dict)
    clock: int = 0

    def is_remembered(self, message_id: str, ttl_ms: int) -> bool:
        """Whether an Ack or Purge of ``message_id`` is still remembered at the current clock."""
        at = self.remembered.get(message_id)
        return at is not None and at + ttl_ms > self.clock

    def prune(self, ttl_ms: int) -> int:
        """Forget expired remembered ids; returns how many were dropped."""
        limit = self.clock - ttl_ms
        expired = [m for m, at in self.remembered.items() if at <= limit]
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


def apply_events(state: PeerState, events: Iterable[Event], ttl_ms: int) -> list[Change]:
    """Apply ``events`` (in txlog offset order) to ``state`` in place; return net changes.

    Changes are sorted by message id. Expired remembered ids are pruned at the end.
    """
    touched: dict[str, bool] = {}  # message id -> queued at the start of the batch
    queued_by: dict[str, Event] = {}
    queue, remembered = state.queue, state.remembered
    for ev in events:
        if ev.timestamp_ms > state.clock:
            state.clock = ev.timestamp_ms
        if ev.kind == SEND:
            mid = ev.message_id
            if mid in queue or state.is_remembered(mid, ttl_ms):
                continue
            touched.setdefault(mid, False)
            queue[mid] = ev.offset
            queued_by[mid] = ev
        elif ev.kind == ACK:
            mid = ev.message_id
            if mid in queue:
                touched.setdefault(mid, True)
                del queue[mid]
            remembered[mid] = state.clock
        elif ev.kind == PURGE:
            for mid in queue:
                touched.setdefault(mid, True)
                remembered[mid] = state.clock
            queue.clear()
        else:
            raise ValueError(f"unknown event kind {ev.kind!r}")
    state.prune(ttl_ms)
    changes = []
    for mid in sorted(touched):
        now = mid in queue
        if now and mid in queued_by:  # queued (or re-queued after its ack expired) here
            changes.append(Change(mid, True, queued_by[mid]))
        elif touched[mid] and not now:
            changes.append(Change(mid, False))
    return changes
