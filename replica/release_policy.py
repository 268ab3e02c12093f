"""GC with the release policy, incremental: each pass resumes where the last one stopped.

Below the GC point a record is dropped only when every rule allows it — acked (an Ack of its
(recipient, message id) applied below the GC point) or purged (a Purge of its recipient
between it and the GC point), older than ``min_age_ms``, and the size rule (keep at least
``retain_bytes`` of records per partition) allows it.

Records are visited once, in offset order, from a per-partition cursor (``G k``, stored with
the deletions) up to the GC point. The cursor stops at the first record younger than
``min_age_ms`` and waits there (so a pass never decodes what it cannot decide yet); a record
whose timestamp lies more than :data:`MAX_SKEW_MS` in the future when the cursor first meets
it is aged from that moment instead (a sender's clock cannot hold GC back for good).

- A Send whose Ack or Purge is not below the GC point yet becomes *pending*: an entry
  ``W k <peer> <message id> offset`` (length-prefixed strings). It is not visited again;
  visiting its Ack releases every pending copy of that (peer, message id), visiting a Purge
  every pending Send of that peer. Duplicate Sends are therefore all released with their Ack.
- The Ack index entry is not removed when a Send is released: a copy appended later (a
  sender's retry) or a Send the Ack beat must still find it. When the Ack is visited, an
  expiry ``E k <due ms> <ack offset>`` is written; after ``ack_window_ms`` past the Ack's
  timestamp the entry is dropped (if it still names that Ack).
- A Purge index entry is dropped when its Purge is visited: every Send before it has been
  decided by then.

Deletions are written in batches of :data:`CHUNK` operations, each with the cursor it
reaches, so a crash in between resumes there; the interval map floor is raised to the cursor
with the last batch. ``budget`` bounds the records one pass visits (the rest waits for the
next pass), so a pass costs the same whatever the size of the store.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from log.codec import default_codec
from log.exceptions import CodecError
from replica.config import ReleasePolicy
from replica.store import Batch, Store, ack_key, ack_prefix, data_key, purge_prefix

__all__ = ["release", "collect", "PassResult", "GcState", "load_state", "pending_prefix",
           "CHUNK", "MAX_SKEW_MS"]

CHUNK = 10_000                # operations per write batch (memory must not grow with the backlog)
MAX_SKEW_MS = 5 * 60_000      # a timestamp further in the future is aged from when it was met
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_STATE = struct.Struct(">qqq")


@dataclass
class GcState:
    """Where GC of one partition stands: records below ``cursor`` are decided (released or
    pending); ``blocked_at`` is the young record the cursor waits at, met at ``blocked_ms``."""

    cursor: int = 0
    blocked_at: int = -1
    blocked_ms: int = 0


@dataclass(frozen=True)
class PassResult:
    """What one pass did."""

    released: int
    visited: int
    cursor: int
    finished: bool   # reached the GC point (nothing left to visit below it)


def _state_key(partition: int) -> bytes:
    return b"G" + _H.pack(partition)


def load_state(store: Store, partition: int) -> GcState:
    """The stored GC state of txlog ``partition`` (a fresh one if GC never ran)."""
    raw = store.db.get(_state_key(partition))
    return GcState(*_STATE.unpack(raw)) if raw else GcState()


def _lp(text: str) -> bytes:
    raw = text.encode()
    return _I.pack(len(raw)) + raw


def pending_prefix(partition: int, peer: str, message_id: str | None = None) -> bytes:
    """Prefix of the pending Sends of ``peer`` (of one message id if given) in
    ``partition``; keys end with the Send's 8-byte offset."""
    prefix = b"W" + _H.pack(partition) + _lp(peer)
    return prefix if message_id is None else prefix + _lp(message_id)


def _expiry_prefix(partition: int) -> bytes:
    return b"E" + _H.pack(partition)


class _Pass:
    """One pass's writes: chunked batches, each carrying the cursor state it reaches."""

    def __init__(self, store: Store, partition: int, state: GcState) -> None:
        self.store, self.k, self.state = store, partition, state
        self.batch: Batch = store.batch()
        self.ops = 0
        self.released = 0
        self.fresh: dict[bytes, list[bytes]] = {}  # pending keys not committed yet, by prefix
        self.gone: set[bytes] = set()               # pending keys deleted, not committed yet

    def delete_record(self, offset: int) -> None:
        self.batch.delete(data_key(self.k, offset))
        self.released += 1
        self.ops += 1

    def put_pending(self, peer: str, message_id: str, offset: int) -> None:
        key = pending_prefix(self.k, peer, message_id) + _Q.pack(offset)
        self.batch.put(key, b"")
        for prefix in (pending_prefix(self.k, peer), pending_prefix(self.k, peer, message_id)):
            self.fresh.setdefault(prefix, []).append(key)
        self.ops += 1

    def release_pending(self, peer: str, message_id: str | None) -> None:
        """Release every pending Send of ``peer`` (of ``message_id`` if given)."""
        prefix = pending_prefix(self.k, peer, message_id)
        keys = [k for k in self.store.db.iterator(prefix=prefix, include_value=False)]
        seen = set(keys)
        keys += [k for k in self.fresh.pop(prefix, []) if k not in seen]
        for key in keys:
            if key in self.gone or (message_id is not None and len(key) != len(prefix) + 8):
                continue
            self.gone.add(key)
            self.batch.delete(key)
            self.delete_record(_Q.unpack(key[-8:])[0])
        if message_id is None:
            for p in [p for p in self.fresh if p.startswith(prefix)]:
                del self.fresh[p]

    def maybe_commit(self) -> None:
        if self.ops >= CHUNK:
            self.commit()
            self.batch, self.ops, self.fresh, self.gone = self.store.batch(), 0, {}, set()

    def commit(self) -> None:
        s = self.state
        self.batch.put(_state_key(self.k), _STATE.pack(s.cursor, s.blocked_at, s.blocked_ms))
        self.batch.commit()


def release(store: Store, partition: int, point: int, policy: ReleasePolicy, now_ms: int,
            budget: int | None = None) -> int:
    """Run one GC pass over txlog ``partition`` below ``point``; returns the number of
    records released (see :func:`collect`)."""
    return collect(store, partition, point, policy, now_ms, budget).released


def collect(store: Store, partition: int, point: int, policy: ReleasePolicy, now_ms: int,
            budget: int | None = None) -> PassResult:
    """One GC pass: expire Ack index entries past their window, then visit the records from
    the cursor up to ``point`` (at most ``budget`` of them) and release what the policy
    allows."""
    state = load_state(store, partition)
    work = _Pass(store, partition, state)
    visited = _expire_acks(work, now_ms, budget)
    point = min(point, store.map("txlog", partition).base_end)
    finished = state.cursor >= point
    if not finished and not (policy.retain_bytes and store.db.approximate_size(
            data_key(partition, 0), data_key(partition, 1 << 62)) <= policy.retain_bytes):
        finished, visited = _visit(work, point, policy, now_ms, budget, visited)
    m = store.map("txlog", partition)
    if m.floor < state.cursor <= m.base_end:
        work.batch.map("txlog", partition).compact_below(state.cursor)
    work.commit()
    return PassResult(work.released, visited, state.cursor, finished)


def _expire_acks(work: _Pass, now_ms: int, budget: int | None) -> int:
    """Drop Ack index entries whose window has passed; returns how many were looked at."""
    db, k, n = work.store.db, work.k, 0
    prefix = _expiry_prefix(k)
    for key, suffix in db.iterator(start=prefix, stop=prefix + _Q.pack(now_ms + 1)):
        if budget is not None and n >= budget:
            break
        n += 1
        ack_off = key[-8:]
        index = ack_prefix(k) + suffix
        if db.get(index) == ack_off:
            work.batch.delete(index)
        work.batch.delete(key)
        work.ops += 1
        work.maybe_commit()
    return n


def _visit(work: _Pass, point: int, policy: ReleasePolicy, now_ms: int,
           budget: int | None, visited: int) -> tuple[bool, int]:
    store, k, state = work.store, work.k, work.state
    decode = default_codec().decode
    old_enough = now_ms - policy.min_age_ms
    for off, value in store.records(k, state.cursor, point):
        if budget is not None and visited >= budget:
            state.cursor = off
            return False, visited
        visited += 1
        try:
            dec = decode(value)
        except CodecError:  # never stored by ingest; keep it, move on
            state.cursor = off + 1
            continue
        rec = dec.record
        ts = rec["timestamp_ms"]
        if ts > old_enough:
            if state.blocked_at != off:
                state.blocked_at, state.blocked_ms = off, now_ms
            skewed = ts > state.blocked_ms + MAX_SKEW_MS
            if not skewed or state.blocked_ms > old_enough:
                state.cursor = off
                return False, visited
        if dec.name == "Send":
            peer, msg_id = rec["recipient"], rec["message_id"]
            acked = store.ack_offset(k, peer, msg_id)
            if (acked is not None and acked < point) or store.purged_between(k, peer, off,
                                                                             point):
                work.delete_record(off)
            else:
                work.put_pending(peer, msg_id, off)
        elif dec.name == "Ack":
            peer, msg_id = rec["peer"], rec["message_id"]
            work.delete_record(off)
            work.release_pending(peer, msg_id)
            if store.ack_offset(k, peer, msg_id) == off:
                due = ts + policy.ack_window_ms
                work.batch.put(_expiry_prefix(k) + _Q.pack(max(0, due)) + _Q.pack(off),
                               ack_key(k, peer, msg_id)[len(ack_prefix(k)):])
        elif dec.name == "Purge":
            peer = rec["peer"]
            work.delete_record(off)
            work.release_pending(peer, None)
            work.batch.delete(purge_prefix(k) + peer.encode() + b"\0" + _Q.pack(off))
        state.cursor = off + 1
        work.maybe_commit()
    state.cursor = max(state.cursor, point)
    return True, visited
