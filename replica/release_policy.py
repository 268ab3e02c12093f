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

- A Send whose Ack or Purge is not below the GC point yet is *pending*: it stays where it is,
  below the cursor, and nothing is written for it (an index of pending Sends by message id
  cost a random-order write per Send, which LevelDB's compactions then kept rewriting).
  Visiting an Ack (or a new Purge, below) marks the partition for a *sweep*
  (:mod:`tidemark.replica.gc_state`): at most every ``sweep_interval_ms``, the records left
  below the cursor are read again in offset order and those now acked or purged below the
  point are released. Duplicate Sends are therefore all released with their Ack.
- The Ack index entry is not removed when a Send is released: a copy appended later (a
  sender's retry) or a Send the Ack beat must still find it. When the Ack is visited, an
  expiry ``E k <due ms> <ack offset>`` is written; after ``ack_window_ms`` past the Ack's
  timestamp the entry is dropped (if it still names that Ack).
- An AckBatch is visited as the Acks of each of its ids, in order, with one expiry for the
  batch: ``E k <due ms> <batch offset> B`` -> the peer and the ids (:func:`batch_expiry`),
  written without reading the index (the expiry drops an id's entry only if it still names
  this batch). Stores written before hold one expiry per id,
  ``E k <due ms> <batch offset> <4-byte index in the batch>`` -> the index suffix; both are
  read. An expiry is applied only once a sweep that started after its Ack was visited has
  finished.
- A range ack (an AckBatch with a range, :mod:`tidemark.replica.ack_ranges`) is indexed by
  one key for the range; a Send it covers is acked by it. Visiting it writes one expiry,
  ``E k <due ms> <batch offset> R`` -> the range key, dropped like a batch's.
- Purges are not txlog records: ingest writes a Purge index entry ``U k peer NUL <offset>``
  from the Purge the queues job keeps in ``queues`` (the operator appends it to ``purges``),
  at the offset the Purge reaches and valued with when it came. A pass that finds an entry
  in force (its offset below the GC point) and not above the cursor marks the partition for
  a sweep (the Sends it reaches below the cursor are pending). The entry is dropped when a
  sweep that started after it came finishes past its offset: every Send it reaches has been
  decided by then, so no entry marks sweeps for good.
- Stores from before sweeps hold ``W k ...`` pending entries: they are deleted (their Sends
  are still there, below the cursor, for the first sweep).
- A DeliveryFailed record (a handler failure of the recipient, kept for delivery counts)
  goes like a Send of the same (peer, message id): with its Ack, or a Purge of the peer.

Deletions are written in batches of :data:`CHUNK` operations, each with the cursor it
reaches, so a crash in between resumes there; the interval map floor is raised to the cursor
with the last batch. ``budget`` bounds the records one pass reads, visited or swept (the rest
waits for the next pass), so a pass costs the same whatever the size of the store.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

from tidemark.log.exceptions import CodecError
from tidemark.log.wire import (
    ACK,
    ACK_BATCH,
    PURGE,
    SEND,
    AckBatchFields,
    Fields,
    ack_batch_header,
    default_codec,
    txlog_readers,
)
from tidemark.replica.ack_ranges import RangeIndex, range_key, ranged, record_span
from tidemark.replica.batch import Batch
from tidemark.replica.config import ReleasePolicy
from tidemark.replica.gc_state import (
    GcState,
    decode_state,
    encode_state,
    finish_sweep,
    start_sweep,
    state_key,
    sweep_due,
)
from tidemark.replica.keys import ack_prefix, data_key, purge_prefix
from tidemark.replica.store import Store

__all__ = ["release", "collect", "PassResult", "GcState", "load_state", "CHUNK", "MAX_SKEW_MS",
           "batch_expiry", "expiry_suffixes"]

log = logging.getLogger(__name__)

CHUNK = 10_000                # operations per write batch (memory must not grow with the backlog)
MAX_SKEW_MS = 5 * 60_000      # a timestamp further in the future is aged from when it was met
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_OLD_PENDING = b"W"           # the pending index of stores from before sweeps
_BATCH = b"B"                 # ends the key of an AckBatch's expiry (one per id before)
_RANGE = b"R"                 # ends the key of a range ack's expiry (its value: the range key)
BatchFields = AckBatchFields  # ``(ACK_BATCH, peer, [message ids], timestamp_ms, span)``


@dataclass(frozen=True)
class PassResult:
    """What one pass did: ``visited`` records met by the cursor, ``swept`` pending ones read
    again by a sweep."""

    released: int
    visited: int
    cursor: int
    finished: bool   # reached the GC point and no sweep is running
    blocked: bool = False  # the cursor waits at a record younger than the minimum age
    swept: int = 0
    sweeping: bool = False  # a sweep is running (it does not wait for the cursor)

    @property
    def more(self) -> bool:
        """Whether the pass stopped on its budget (more work is ready now)."""
        return not self.finished and (self.sweeping or not self.blocked)


def load_state(store: Store, partition: int) -> GcState:
    """The stored GC state of txlog ``partition`` (a fresh one if GC never ran)."""
    return decode_state(store.db.get(state_key(partition)))


def _expiry_prefix(partition: int) -> bytes:
    return b"E" + _H.pack(partition)


class _Pass:
    """One pass's writes: chunked batches, each carrying the GC state it reaches."""

    def __init__(self, store: Store, partition: int, state: GcState) -> None:
        self.store, self.k, self.state = store, partition, state
        self.batch: Batch = store.batch()
        self.ops = 0
        self.released = 0

    def delete_record(self, offset: int) -> None:
        self.batch.delete_record(self.k, offset)  # and out of its range's digest
        self.released += 1
        self.ops += 1

    def maybe_commit(self, at_least: int = CHUNK) -> None:
        """Commit once ``at_least`` operations are waiting (0: now, so reads see them)."""
        if self.ops >= at_least:
            self.commit()
            self.batch, self.ops = self.store.batch(), 0

    def commit(self) -> None:
        self.batch.put(state_key(self.k), encode_state(self.state))
        self.batch.commit()


def release(store: Store, partition: int, point: int, policy: ReleasePolicy, now_ms: int,
            budget: int | None = None) -> int:
    """Run one GC pass over txlog ``partition`` below ``point``; returns the number of
    records released (see :func:`collect`)."""
    return collect(store, partition, point, policy, now_ms, budget).released


def collect(store: Store, partition: int, point: int, policy: ReleasePolicy, now_ms: int,
            budget: int | None = None) -> PassResult:
    """One GC pass: expire Ack index entries past their window, then visit the records from
    the cursor up to ``point``, then sweep the pending ones if a sweep is due or running (at
    most ``budget`` records read in all), and release what the policy allows."""
    state = load_state(store, partition)
    work = _Pass(store, partition, state)
    visited = _expire_acks(work, now_ms, budget) + _drop_old_pending(work, budget)
    point = min(point, store.map("txlog", partition).base_end)
    finished, blocked, swept = state.cursor >= point, False, 0
    if policy.retain_bytes and store.db.approximate_size(
            data_key(partition, 0), data_key(partition, 1 << 62)) <= policy.retain_bytes:
        blocked = not finished  # the size rule keeps everything for now
    else:
        decider = _Decider(store, partition, point)  # one read of the Purge index per pass
        if not finished:
            finished, visited = _visit(work, decider, policy, now_ms, budget, visited)
            blocked = not finished and state.blocked_at == state.cursor
        if any(below <= state.cursor and below < point for below in decider.bounds):
            state.dirty = True  # a Purge in force whose entry no sweep has served yet: the
            #                     Sends it reaches below the cursor are pending
        if sweep_due(state, now_ms, policy.sweep_interval_ms):
            start_sweep(state, now_ms)
        if state.sweeping and (budget is None or visited < budget):
            work.maybe_commit(0)  # the sweep reads the store: not what this pass released
            swept = _sweep(work, decider, now_ms, None if budget is None else budget - visited)
        finished = finished and not state.sweeping
    if state.cursor > store.map("txlog", partition).floor:
        work.batch.raise_floor("txlog", partition, state.cursor)  # on the map current then
    work.commit()
    return PassResult(work.released, visited, state.cursor, finished, blocked, swept,
                      state.sweeping)


def _drop_old_pending(work: _Pass, budget: int | None) -> int:
    """Delete a chunk of the pending index a store from before sweeps may hold (only while
    the state says so: stores written since never look)."""
    if not work.state.legacy:
        return 0
    prefix, n, most = _OLD_PENDING + _H.pack(work.k), 0, min(CHUNK, budget or CHUNK)
    for key in work.store.db.iterator(prefix=prefix, include_value=False):
        if n >= most:
            break
        work.batch.delete(key)
        n += 1
    work.ops += n
    work.state.legacy = n > 0  # another look next pass, until one finds nothing
    return n


def batch_expiry(peer: bytes, ids: list[bytes]) -> bytes:
    """The value of an AckBatch's expiry: the peer and each id, length-prefixed."""
    return b"".join([_I.pack(len(peer)), peer,
                     *(part for mid in ids for part in (_I.pack(len(mid)), mid))])


def expiry_suffixes(value: bytes) -> list[bytes]:
    """The Ack index suffixes (``peer NUL message id``) of an AckBatch's expiry value."""
    (size,), at = _I.unpack_from(value), _I.size
    head, at = value[at:at + size] + b"\0", at + size
    out = []
    while at < len(value):
        (size,), at = _I.unpack_from(value, at), at + _I.size
        out.append(head + value[at:at + size])
        at += size
    return out


def _expire_acks(work: _Pass, now_ms: int, budget: int | None) -> int:
    """Drop Ack index entries whose window has passed, once a sweep that started after
    their Ack was visited has finished; returns how many were looked at."""
    db, k, n = work.store.db, work.k, 0
    prefix, aprefix = _expiry_prefix(k), ack_prefix(k)
    for key, value in db.iterator(start=prefix, stop=prefix + _Q.pack(now_ms + 1)):
        if budget is not None and n >= budget:
            break
        at = key[len(prefix) + 8:len(prefix) + 16]  # the Ack (or AckBatch) offset
        if _Q.unpack(at)[0] >= work.state.swept:
            break  # a pending Send may still need it (expiries come in about log order)
        kind = key[len(prefix) + 16:]
        if kind == _RANGE:  # a range ack's: one key
            work.batch.delete(value)
            work.batch.delete(key)
            n += 1
            work.ops += 2
            work.maybe_commit()
            continue
        suffixes = expiry_suffixes(value) if kind == _BATCH else [value]
        n += len(suffixes)
        for suffix in suffixes:  # each unless a later Ack took the entry over
            work.batch.delete_if(aprefix + suffix, at)
        work.batch.delete(key)
        work.ops += len(suffixes)
        work.maybe_commit()
    return n


def _fields(readers: dict[bytes, Reader], value: bytes
            ) -> Fields | BatchFields | None:
    """``(kind, peer, message id, timestamp)`` of a stored record: the fast reader for the
    current schemas, the codec for anything else (an older writer schema); for an AckBatch
    ``(ACK_BATCH, peer, [message ids], timestamp, span)``; None if nothing can read it (ingest
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
                rec["timestamp_ms"], record_span(rec))
    if dec.name == "Purge":
        return PURGE, rec["peer"].encode(), b"", rec["timestamp_ms"]
    if dec.name == "DeliveryFailed":  # counts a delivery of (peer, message id): goes like one
        return SEND, rec["peer"].encode(), rec["message_id"].encode(), rec["timestamp_ms"]
    return None


def _purge_index(store: Store, k: int) -> tuple[set[bytes], list[int]]:
    """Peers with a Purge in the index of ``k`` (Purges are rare: a small set), and the
    offset each entry reaches. A Purge that ingest adds during a pass is left to the next
    one."""
    prefix, peers, bounds = purge_prefix(k), set(), []
    for key in store.db.iterator(prefix=prefix, include_value=False):
        peers.add(key[len(prefix):-9])
        bounds.append(_Q.unpack(key[-8:])[0])
    return peers, bounds


class _Decider:
    """Whether a Send (or DeliveryFailed) may go at GC point ``point``: acked below it (by
    id or by a range), or its recipient purged between it and the point."""

    def __init__(self, store: Store, k: int, point: int) -> None:
        self.store, self.point, self.get = store, point, store.db.get
        self.aprefix, self.uprefix = ack_prefix(k), purge_prefix(k)
        self.purging, self.bounds = _purge_index(store, k)
        self.ranges = RangeIndex(self.get, lambda prefix: list(store.db.iterator(
            prefix=prefix, include_value=False)), k)

    def releases(self, peer: bytes, msg_id: bytes, offset: int) -> bool:
        if self.ranges.acked(peer, msg_id, offset, self.point):
            return True
        acked = self.get(self.aprefix + peer + b"\0" + msg_id)
        return (acked is not None and _Q.unpack(acked)[0] < self.point) or (
            peer in self.purging and _purged_between(self.store, self.uprefix + peer + b"\0",
                                                     offset, self.point))


def _visit(work: _Pass, decider: _Decider, policy: ReleasePolicy, now_ms: int,
           budget: int | None, visited: int) -> tuple[bool, int]:
    store, k, state, point = work.store, work.k, work.state, decider.point
    readers, get, aprefix = _readers(), store.db.get, ack_prefix(k)
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
        kind, peer, msg_id, ts = fields[:4]  # msg_id: the ids of an AckBatch
        if ts > old_enough:
            if state.blocked_at != off:
                state.blocked_at, state.blocked_ms = off, now_ms
            skewed = ts > state.blocked_ms + MAX_SKEW_MS
            if not skewed or state.blocked_ms > old_enough:
                state.cursor = off
                return False, visited
        if kind == SEND:
            assert isinstance(msg_id, bytes)
            if decider.releases(peer, msg_id, off):
                work.delete_record(off)  # else pending: left for a sweep
        elif kind in (ACK, ACK_BATCH):
            work.delete_record(off)
            state.dirty = True
            at = _Q.pack(off)
            expiry = _expiry_prefix(k) + _Q.pack(max(0, ts + policy.ack_window_ms)) + at
            span = fields[4] if len(fields) > 4 else None  # type: ignore[misc]
            if isinstance(msg_id, list) and span is not None and ranged(k, msg_id, span):
                work.batch.put(expiry + _RANGE, range_key(k, peer, span[1], span[2], off))
            elif isinstance(msg_id, list):
                work.batch.put(expiry + _BATCH, batch_expiry(peer, msg_id))
                visited += max(0, len(msg_id) - 1)  # a batch weighs its ids in the budget
            elif get(aprefix + peer + b"\0" + msg_id) == at:
                work.batch.put(expiry, peer + b"\0" + msg_id)
        else:  # PURGE: its index entry goes when a sweep has decided the Sends before it
            work.delete_record(off)
            state.dirty = True
        state.cursor = off + 1
        work.maybe_commit()
    state.cursor = max(state.cursor, point)
    return True, visited


def _sweep(work: _Pass, decider: _Decider, now_ms: int, budget: int | None) -> int:
    """Read the records left below the sweep's horizon again (pending Sends, and records
    nothing can read) and release the Sends now acked or purged below the decider's point;
    returns how many were read. Finishing the sweep drops the Purge index entries it has
    served."""
    store, k, state = work.store, work.k, work.state
    readers, n = _readers(), 0
    for off, value in store.records(k, state.sweep_at, state.horizon):
        if budget is not None and n >= budget:
            state.sweep_at = off
            return n
        n += 1
        fields = _fields(readers, value)
        if fields is not None and fields[0] == SEND and decider.releases(
                fields[1], fields[2], off):  # type: ignore[arg-type]  # a Send: one id
            work.delete_record(off)
            work.maybe_commit()
        elif state.kept < 0:
            state.kept = off
        state.sweep_at = off + 1
    for key, value in list(store.db.iterator(prefix=decider.uprefix)):
        came = _Q.unpack(value)[0] if len(value) == 8 else 0
        if _Q.unpack(key[-8:])[0] < state.horizon and came < state.started_ms:
            work.batch.delete(key)  # every pass of this sweep had it: the Sends it reaches
            #                         below the horizon are decided, those above visited
    finish_sweep(state, now_ms)
    return n


def _purged_between(store: Store, prefix: bytes, after: int, before: int) -> bool:
    for _ in store.db.iterator(start=prefix + _Q.pack(after + 1),
                               stop=prefix + _Q.pack(max(after + 1, before)),
                               include_value=False):
        return True
    return False


Reader = Callable[[bytes], "Fields | BatchFields"]
_READERS: dict[bytes, Reader] | None = None


def _read_batch(scan: Callable[[bytes], BatchFields | None]) -> Reader:
    def read(value: bytes) -> BatchFields:
        fields = scan(value)
        if fields is None:
            raise ValueError("not a well-formed AckBatch")
        return fields
    return read


def _readers() -> dict[bytes, Reader]:
    global _READERS
    if _READERS is None:
        codec = default_codec()
        readers: dict[bytes, Reader] = dict(txlog_readers(codec))
        batch = ack_batch_header(codec)
        if batch is not None:
            readers[batch[0]] = _read_batch(batch[1])
        _READERS = readers
    return _READERS
