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
- An AckBatch is visited as the Acks of each of its ids, in order; their expiries are
  ``E k <due ms> <batch offset> <4-byte index in the batch>``.
- A Purge index entry is dropped when its Purge is visited: every Send before it has been
  decided by then.
- A DeliveryFailed record (a handler failure of the recipient, kept for delivery counts)
  goes like a Send of the same (peer, message id): with its Ack, or a Purge of the peer.

Deletions are written in batches of :data:`CHUNK` operations, each with the cursor it
reaches, so a crash in between resumes there; the interval map floor is raised to the cursor
with the last batch. ``budget`` bounds the records one pass visits (the rest waits for the
next pass), so a pass costs the same whatever the size of the store.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

from log.codec import default_codec
from log.exceptions import CodecError
from replica.batch import Batch
from replica.config import ReleasePolicy
from replica.fastpath import ACK, PURGE, SEND, Fields, txlog_readers
from replica.keys import ack_prefix, data_key, purge_prefix
from replica.store import Store

__all__ = ["release", "collect", "PassResult", "GcState", "load_state", "pending_prefix",
           "CHUNK", "MAX_SKEW_MS"]

log = logging.getLogger(__name__)

CHUNK = 10_000                # operations per write batch (memory must not grow with the backlog)
MAX_SKEW_MS = 5 * 60_000      # a timestamp further in the future is aged from when it was met
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_STATE = struct.Struct(">qqq")
ACK_BATCH = 3                 # the kind of an AckBatch in what _fields returns
#: ``(ACK_BATCH, peer, [message ids], timestamp_ms)``
BatchFields = tuple[int, bytes, list[bytes], int]


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
    blocked: bool = False  # waiting at a record younger than the minimum age

    @property
    def more(self) -> bool:
        """Whether the pass stopped on its budget (more work is ready now)."""
        return not self.finished and not self.blocked


def _state_key(partition: int) -> bytes:
    return b"G" + _H.pack(partition)


def load_state(store: Store, partition: int) -> GcState:
    """The stored GC state of txlog ``partition`` (a fresh one if GC never ran)."""
    raw = store.db.get(_state_key(partition))
    return GcState(*_STATE.unpack(raw)) if raw else GcState()


def _lp(raw: bytes) -> bytes:
    return _I.pack(len(raw)) + raw


def pending_prefix(partition: int, peer: bytes, message_id: bytes | None = None) -> bytes:
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
        self.batch.delete_record(self.k, offset)  # and out of its range's digest
        self.released += 1
        self.ops += 1

    def put_pending(self, peer: bytes, message_id: bytes, offset: int) -> None:
        key = pending_prefix(self.k, peer, message_id) + _Q.pack(offset)
        self.batch.put(key, b"")
        for prefix in (pending_prefix(self.k, peer), pending_prefix(self.k, peer, message_id)):
            self.fresh.setdefault(prefix, []).append(key)
        self.ops += 1

    def release_pending(self, peer: bytes, message_id: bytes | None) -> None:
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
    finished, blocked = state.cursor >= point, False
    if not finished and policy.retain_bytes and store.db.approximate_size(
            data_key(partition, 0), data_key(partition, 1 << 62)) <= policy.retain_bytes:
        blocked = True  # the size rule keeps everything for now
    elif not finished:
        finished, visited = _visit(work, point, policy, now_ms, budget, visited)
        blocked = not finished and state.blocked_at == state.cursor
    if state.cursor > store.map("txlog", partition).floor:
        work.batch.raise_floor("txlog", partition, state.cursor)  # on the map current then
    work.commit()
    return PassResult(work.released, visited, state.cursor, finished, blocked)


def _expire_acks(work: _Pass, now_ms: int, budget: int | None) -> int:
    """Drop Ack index entries whose window has passed; returns how many were looked at."""
    db, k, n = work.store.db, work.k, 0
    prefix = _expiry_prefix(k)
    for key, suffix in db.iterator(start=prefix, stop=prefix + _Q.pack(now_ms + 1)):
        if budget is not None and n >= budget:
            break
        n += 1
        index = ack_prefix(k) + suffix
        at = key[len(prefix) + 8:len(prefix) + 16]  # the Ack (or AckBatch) offset
        work.batch.delete_if(index, at)  # unless a later Ack took the entry over
        work.batch.delete(key)
        work.ops += 1
        work.maybe_commit()
    return n


def _fields(readers: dict[bytes, Callable[[bytes], Fields]], value: bytes
            ) -> Fields | BatchFields | None:
    """``(kind, peer, message id, timestamp)`` of a stored record: the fast reader for the
    current schemas, the codec for anything else (an older writer schema); for an AckBatch
    ``(ACK_BATCH, peer, [message ids], timestamp)``; None if nothing can read it (ingest
    never stores such a record)."""
    read = readers.get(value[:10])
    if read is not None:
        try:
            return read(value)
        except (IndexError, ValueError):
            pass
    try:
        dec = default_codec().decode(value)
    except CodecError:
        return None
    rec = dec.record
    if dec.name == "Send":
        return SEND, rec["recipient"].encode(), rec["message_id"].encode(), rec["timestamp_ms"]
    if dec.name == "Ack":
        return ACK, rec["peer"].encode(), rec["message_id"].encode(), rec["timestamp_ms"]
    if dec.name == "AckBatch":
        return (ACK_BATCH, rec["peer"].encode(), [m.encode() for m in rec["message_ids"]],
                rec["timestamp_ms"])
    if dec.name == "Purge":
        return PURGE, rec["peer"].encode(), b"", rec["timestamp_ms"]
    if dec.name == "DeliveryFailed":  # counts a delivery of (peer, message id): goes like one
        return SEND, rec["peer"].encode(), rec["message_id"].encode(), rec["timestamp_ms"]
    return None


def _purging_peers(store: Store, k: int) -> set[bytes]:
    """Peers with a Purge in the index of ``k`` (Purges are rare: a small set). Purges that
    ingest adds during a pass lie at or above the base end, so above every GC point."""
    prefix = purge_prefix(k)
    return {key[len(prefix):-9] for key in store.db.iterator(prefix=prefix,
                                                            include_value=False)}


def _visit(work: _Pass, point: int, policy: ReleasePolicy, now_ms: int,
           budget: int | None, visited: int) -> tuple[bool, int]:
    store, k, state = work.store, work.k, work.state
    readers = _readers()
    get = store.db.get
    aprefix, uprefix = ack_prefix(k), purge_prefix(k)
    purging = _purging_peers(store, k)
    old_enough = now_ms - policy.min_age_ms
    for off, value in store.records(k, state.cursor, point):
        if budget is not None and visited >= budget:
            state.cursor = off
            return False, visited
        visited += 1
        fields = _fields(readers, value)
        if fields is None:  # never stored by ingest; keep it, move on
            state.cursor = off + 1
            continue
        kind, peer, msg_id, ts = fields  # msg_id: the ids of an AckBatch
        if ts > old_enough:
            if state.blocked_at != off:
                state.blocked_at, state.blocked_ms = off, now_ms
            skewed = ts > state.blocked_ms + MAX_SKEW_MS
            if not skewed or state.blocked_ms > old_enough:
                state.cursor = off
                return False, visited
        if kind == SEND:
            assert isinstance(msg_id, bytes)
            acked = get(aprefix + peer + b"\0" + msg_id)
            if (acked is not None and _Q.unpack(acked)[0] < point) or (
                    peer in purging and _purged_between(store, uprefix + peer + b"\0", off,
                                                        point)):
                work.delete_record(off)
            else:
                work.put_pending(peer, msg_id, off)
        elif kind in (ACK, ACK_BATCH):
            work.delete_record(off)
            at = _Q.pack(off)
            expiry = _expiry_prefix(k) + _Q.pack(max(0, ts + policy.ack_window_ms)) + at
            ids = msg_id if isinstance(msg_id, list) else None
            for i, mid in enumerate(ids if ids is not None else (msg_id,)):
                assert isinstance(mid, bytes)
                work.release_pending(peer, mid)
                suffix = peer + b"\0" + mid
                if get(aprefix + suffix) == at:
                    work.batch.put(expiry + (_I.pack(i) if ids is not None else b""), suffix)
            if ids is not None:
                visited += max(0, len(ids) - 1)  # a batch weighs its ids in the budget
        else:  # PURGE
            work.delete_record(off)
            work.release_pending(peer, None)
            work.batch.delete(uprefix + peer + b"\0" + _Q.pack(off))
        state.cursor = off + 1
        work.maybe_commit()
    state.cursor = max(state.cursor, point)
    return True, visited


def _purged_between(store: Store, prefix: bytes, after: int, before: int) -> bool:
    for _ in store.db.iterator(start=prefix + _Q.pack(after + 1),
                               stop=prefix + _Q.pack(max(after + 1, before)),
                               include_value=False):
        return True
    return False


_READERS: dict[bytes, Callable[[bytes], Fields]] | None = None


def _readers() -> dict[bytes, Callable[[bytes], Fields]]:
    global _READERS
    if _READERS is None:
        _READERS = txlog_readers(default_codec())
    return _READERS
