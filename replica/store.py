"""The node's LevelDB store (plyvel): records, indexes, interval maps and positions.

Everything one ingest step changes — records, indexes, the interval map and the position
of each touched partition — goes into one LevelDB write batch, so a kill -9 at any moment
leaves a store that resumes with no gap and no duplicate. In-memory maps are replaced only
after the batch is written.

Keys (``tp`` = topic code ``t``/``q`` + 2-byte partition, offsets 8-byte big-endian):
``D t k off`` txlog record; ``A k peer\\0msg`` ack offset; ``U k peer\\0 off`` purge;
``Q k key`` queue entry (by Kafka key); ``R k`` queue progress; ``M tp`` interval map;
``P tp`` position and last-applied time; ``L seq`` loss ledger; ``X...`` metadata;
``I k peer\\0 off`` queue index (txlog order of a peer's queue, value: the queue key);
``Y pin`` GC pin lease (JSON).
``Z tp off``: dead-letter ledger (poison records whose dead-letter copy Kafka refused).
``G k`` GC cursor, ``W k ...`` pending Sends, ``E k ...`` Ack index expiries: owned by
:mod:`replica.release_policy`.
``H k range``: digest of the txlog records of one backfill range (:mod:`replica.digests`),
updated in the batch that puts or deletes those records.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import plyvel

from gossip.interval_map import IntervalMap, record_hash
from replica.digests import RANGE_BITS, merge_deltas, range_digest, rebuild_digests
from replica.exceptions import StoreError

__all__ = ["Store", "StoreOptions", "Batch", "TOPIC_CODES", "tp_name", "data_key", "data_prefix",
           "ack_key", "ack_prefix", "purge_prefix", "queue_prefix", "progress_key",
           "deadletter_key",
           "queue_index_prefix", "queue_index_key", "PIN_PREFIX", "pin_key", "ADOPT_FILE",
           "adopt_copy"]

TOPIC_CODES = {"txlog": b"t", "queues": b"q"}
_CODE_TOPICS = {v: k for k, v in TOPIC_CODES.items()}
_H = struct.Struct(">H")
_Q = struct.Struct(">Q")
_HQ = struct.Struct(">HQ")
_POS = struct.Struct(">qq")


def tp_name(topic: str, partition: int) -> str:
    """The status name of a (topic, partition): ``txlog/3``."""
    return f"{topic}/{partition}"


def _tp(topic: str, partition: int) -> bytes:
    return TOPIC_CODES[topic] + _H.pack(partition)


def data_key(partition: int, offset: int) -> bytes:
    """Key of txlog record ``offset`` of ``partition``."""
    return b"Dt" + _HQ.pack(partition, offset)


def data_prefix(partition: int) -> bytes:
    """Prefix of every txlog record key of ``partition`` (followed by the 8-byte offset)."""
    return b"Dt" + _H.pack(partition)


def ack_prefix(partition: int) -> bytes:
    """Prefix of the Ack index of ``partition`` (followed by ``peer\\0message_id``)."""
    return b"A" + _H.pack(partition)


def ack_key(partition: int, peer: str, message_id: str) -> bytes:
    """Ack index key of (peer, message_id); the value is the Ack's 8-byte offset."""
    return ack_prefix(partition) + f"{peer}\0{message_id}".encode()


def purge_prefix(partition: int) -> bytes:
    """Prefix of the Purge index of ``partition`` (followed by ``peer\\0`` and the offset)."""
    return b"U" + _H.pack(partition)


def queue_prefix(partition: int) -> bytes:
    """Prefix of queue entries of queues partition ``partition`` (followed by the Kafka key)."""
    return b"Q" + _H.pack(partition)


def progress_key(partition: int) -> bytes:
    """Key of the last QueueProgress of queues partition ``partition``."""
    return b"R" + _H.pack(partition)


def queue_index_prefix(partition: int, peer: str | None = None) -> bytes:
    """Prefix of the queue index of queues partition ``partition`` (of one peer if given);
    index keys continue with ``peer\\0`` and the entry's 8-byte txlog offset."""
    prefix = b"I" + _H.pack(partition)
    return prefix if peer is None else prefix + peer.encode() + b"\0"


def queue_index_key(partition: int, peer: str, offset: int) -> bytes:
    """Queue index key of ``peer``'s entry at txlog ``offset``; the value is the queue key."""
    return queue_index_prefix(partition, peer) + _Q.pack(offset)


#: Prefix of the GC pin leases (``Y`` + pin id; the value is the lease as JSON).
PIN_PREFIX = b"Y"


def pin_key(pin_id: str) -> bytes:
    """Key of GC pin lease ``pin_id``."""
    return PIN_PREFIX + pin_id.encode()


def deadletter_key(topic: str, partition: int, offset: int) -> bytes:
    """Key of the dead-letter ledger entry of record ``offset`` of (topic, partition)."""
    return b"Z" + _tp(topic, partition) + _Q.pack(offset)


_CUT_KEY = b"Xcut"
_NEW_KEY = b"Xnew"  # present while a new store's rejoin is not committed
_FORMAT = b"2"      # 2: digests per backfill range (``H`` keys)
#: A file an operator creates in a copied store folder to let another node adopt it.
ADOPT_FILE = "ADOPT"


@dataclass(frozen=True)
class StoreOptions:
    """LevelDB memory knobs; together they bound the store's share of the node's RSS,
    whatever the size of the store: block cache + two write buffers (the memtable being
    filled and the one being flushed) + the open-table cache. LevelDB maps table files
    (mmap) and the pages a read touched count in RSS until the table leaves the table
    cache, so ``open_tables * table_file_mb`` bounds that part; LevelDB's default of 1000
    open files would let a full scan (GC) map the whole store."""

    cache_mb: int = 32        # block cache (LRU)
    write_buffer_mb: int = 16  # memtable size
    open_tables: int = 64     # table cache entries (LevelDB max_open_files - 10)
    table_file_mb: int = 2    # target size of one table file (LevelDB max_file_size)

    def leveldb(self) -> dict[str, int]:
        """plyvel.DB keyword arguments."""
        return {"lru_cache_size": self.cache_mb << 20,
                "write_buffer_size": self.write_buffer_mb << 20,
                "max_open_files": self.open_tables + 10,
                "max_file_size": self.table_file_mb << 20}


class Batch:
    """One atomic write: records plus the map/position updates of the touched partitions."""

    def __init__(self, store: "Store", sync: bool = False) -> None:
        self.store = store
        self.wb = store.db.write_batch(sync=sync)
        self.maps: dict[tuple[str, int], IntervalMap] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.applied_ms: int = 0
        self.floors: dict[tuple[str, int], int] = {}          # floor raises (GC)
        self.delete_ifs: list[tuple[bytes, bytes]] = []       # (key, value): delete if equal
        # queue keys this batch upserted or deleted: (partition, key) -> (peer, txlog offset)
        # or None (replica.queue_index reads these before the store)
        self.queue_keys: dict[tuple[int, bytes], tuple[str, int] | None] = {}
        # digest changes by (partition, backfill range): [xor, count, bytes]
        self.digests: dict[tuple[int, int], list[int]] = {}
        self.dropped: dict[tuple[int, int], None] = {}  # records deleted, value read at commit

    def put_record(self, partition: int, offset: int, value: bytes) -> None:
        """Put txlog record ``offset`` (not stored yet) and count it in its range's digest."""
        self.wb.put(b"Dt" + _HQ.pack(partition, offset), value)
        d = self.digests.get((partition, offset >> RANGE_BITS))
        if d is None:
            d = self.digests[(partition, offset >> RANGE_BITS)] = [0, 0, 0]
        d[0] ^= record_hash(offset, value)
        d[1] += 1
        d[2] += len(value)

    def delete_record(self, partition: int, offset: int) -> None:
        """Delete txlog record ``offset`` (if stored) and take it out of its range's digest
        (its stored value is read at commit time, under the commit lock). A record put
        after this call in the same batch replaces it."""
        self.wb.delete(data_key(partition, offset))
        self.dropped[(partition, offset)] = None

    def map(self, topic: str, partition: int) -> IntervalMap:
        """A working copy of the map, written with the batch."""
        key = (topic, partition)
        m = self.maps.get(key)
        if m is None:
            m = self.maps[key] = self.store.map(topic, partition).copy()
        return m

    def put(self, key: bytes, value: bytes) -> None:
        """Put a raw key."""
        self.wb.put(key, value)

    def delete(self, key: bytes) -> None:
        """Delete a raw key."""
        self.wb.delete(key)

    def raise_floor(self, topic: str, partition: int, floor: int) -> None:
        """Raise the map floor to ``floor`` (capped at the base end) on the map current at
        commit time — for GC, which runs beside ingest and must not write a stale map."""
        key = (topic, partition)
        self.floors[key] = max(floor, self.floors.get(key, 0))

    def delete_if(self, key: bytes, value: bytes) -> None:
        """Delete ``key`` at commit time if it still holds ``value``."""
        self.delete_ifs.append((key, value))

    def advance(self, topic: str, partition: int, start: int, end: int) -> None:
        """Mark ``[start, end)`` applied and set the position to at least ``end``."""
        self.map(topic, partition).insert(start, end)
        key = (topic, partition)
        self.positions[key] = max(end, self.positions.get(key, self.store.position(*key) or 0))

    def commit(self) -> None:
        """Write everything atomically, then publish the new maps and positions. Commits
        are serialized (ingest and GC run on different threads): maps are merged with the
        current ones (the floor only rises) and conditional deletes are checked here."""
        with self.store.lock:
            self._commit()

    def _commit(self) -> None:
        for key, floor in self.floors.items():
            m = self.maps.get(key)
            if m is None:
                m = self.maps[key] = self.store.map(*key).copy()
            m.floor = max(m.floor, min(floor, m.base_end))
        for key, m in self.maps.items():
            current = self.store.maps.get(key)
            if current is not None and m.floor < current.floor <= m.base_end:
                m.floor = current.floor  # raised by GC since this batch copied the map
        for raw, value in self.delete_ifs:
            if self.store.db.get(raw) == value:
                self.wb.delete(raw)
        for k, off in self.dropped:
            old = self.store.db.get(data_key(k, off))
            if old is not None:
                d = self.digests.setdefault((k, off >> RANGE_BITS), [0, 0, 0])
                d[0] ^= record_hash(off, old)
                d[1] -= 1
                d[2] -= len(old)
        if self.digests:
            merge_deltas(self.store.db, self.wb, self.digests)
        for (topic, k), m in self.maps.items():
            self.wb.put(b"M" + _tp(topic, k), m.to_bytes())
        for (topic, k), pos in self.positions.items():
            self.wb.put(b"P" + _tp(topic, k), _POS.pack(pos, self.applied_ms))
        self.wb.write()
        self.store.maps.update(self.maps)
        for key, pos in self.positions.items():
            self.store.positions[key] = pos
            self.store.applied_ms[key] = self.applied_ms


class Store:
    """A node's LevelDB folder."""

    def __init__(self, path: str | Path, node_id: str, create: bool = True,
                 options: StoreOptions | None = None) -> None:
        self.path = Path(path)
        self.node_id = node_id
        self.options = options or StoreOptions()
        self.lock = threading.RLock()  # serializes Batch commits (ingest, GC, backfill)
        try:
            if create:
                self.path.mkdir(parents=True, exist_ok=True)
            self.db = plyvel.DB(str(self.path), create_if_missing=create, paranoid_checks=True,
                                **self.options.leveldb())
        except plyvel.CorruptionError as exc:
            raise StoreError(f"LevelDB store {self.path} is corrupt ({_short(exc)}); move it "
                             f"away and restart the node to rebuild it from Kafka and peers"
                             ) from None
        except plyvel.IOError as exc:
            text = _short(exc)
            if "lock" in text.lower():
                raise StoreError(f"LevelDB store {self.path} is in use by another process") \
                    from None
            raise StoreError(f"cannot open LevelDB store {self.path}: {text}") from None
        except plyvel.Error as exc:
            raise StoreError(f"cannot open LevelDB store {self.path}: {_short(exc)}") from None
        owner = self.db.get(b"Xnode")
        #: The node whose copied store this node adopted at this open, if any.
        self.adopted_from: str | None = None
        if owner is None:  # new: it stays "new" until mark_complete (a committed rejoin)
            wb = self.db.write_batch(sync=True)
            wb.put(b"Xnode", node_id.encode())
            wb.put(b"Xformat", _FORMAT)
            wb.put(_NEW_KEY, b"1")
            wb.write()
        elif owner.decode() != node_id and (self.path / ADOPT_FILE).exists():
            self.adopted_from = owner.decode()
            adopt_copy(self.db, node_id)
            (self.path / ADOPT_FILE).unlink()
        elif owner.decode() != node_id:
            self.db.close()
            raise StoreError(f"LevelDB store {self.path} belongs to node {owner.decode()!r},"
                             f" not {node_id!r} (to seed {node_id} from a copy of it, create "
                             f"the file {ADOPT_FILE} in the folder)")
        if self.db.get(b"Xformat") != _FORMAT:  # written before digests per range
            rebuild_digests(self.db)
            self.db.put(b"Xformat", _FORMAT, sync=True)
        #: True while the store is new: created empty, and its node has not yet committed
        #: the rejoin that makes it stop counting toward the cut (see :meth:`mark_complete`).
        self.created = self.db.get(_NEW_KEY) is not None
        self.maps: dict[tuple[str, int], IntervalMap] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.applied_ms: dict[tuple[str, int], int] = {}
        try:
            for key, value in self.db.iterator(prefix=b"M"):
                self.maps[self._untp(key[1:])] = IntervalMap.from_bytes(value)
            for key, value in self.db.iterator(prefix=b"P"):
                pos, ms = _POS.unpack(value)
                self.positions[self._untp(key[1:])] = pos
                self.applied_ms[self._untp(key[1:])] = ms
        except (plyvel.Error, struct.error) as exc:
            self.db.close()
            raise StoreError(f"LevelDB store {self.path} is corrupt ({_short(exc)})") from None

    @staticmethod
    def _untp(raw: bytes) -> tuple[str, int]:
        return _CODE_TOPICS[raw[:1]], _H.unpack(raw[1:3])[0]

    # ---- reads -----------------------------------------------------------------------------
    def map(self, topic: str, partition: int) -> IntervalMap:
        """The applied-offsets map (empty if never touched)."""
        return self.maps.get((topic, partition)) or IntervalMap()

    def position(self, topic: str, partition: int) -> int | None:
        """Next offset to consume, or None if the partition was never consumed."""
        return self.positions.get((topic, partition))

    def batch(self, sync: bool = False) -> Batch:
        """Start an atomic write (``sync`` also survives a machine crash, not just kill -9)."""
        return Batch(self, sync)

    def records(self, partition: int, start: int = 0, end: int = 1 << 62
                ) -> Iterator[tuple[int, bytes]]:
        """Stored txlog records ``(offset, value)`` of ``partition`` in ``[start, end)``."""
        for key, value in self.db.iterator(start=data_key(partition, start),
                                           stop=data_key(partition, end)):
            yield _Q.unpack(key[4:12])[0], value

    def digest(self, partition: int, start: int, end: int) -> tuple[int, int]:
        """``(xor of record hashes, count)`` of the stored records in ``[start, end)`` —
        the equality check backfill uses to skip ranges both sides already hold (whole
        backfill ranges from their stored digests, see :mod:`replica.digests`)."""
        acc, n, _ = range_digest(self.db, self.records, partition, start, end)
        return acc, n

    def digest_upto(self, partition: int, start: int, end: int, max_bytes: int | None = None
                    ) -> tuple[int, int, int]:
        """``(digest, count, stop)`` of the stored records in ``[start, stop)``: ``stop`` is
        ``end``, or with ``max_bytes`` the offset of the first record that would take the
        value bytes past it (at least one record is always taken)."""
        return range_digest(self.db, self.records, partition, start, end, max_bytes)

    def ack_offset(self, partition: int, peer: str, message_id: str) -> int | None:
        """Offset of the Ack of (peer, message_id), if applied."""
        raw = self.db.get(ack_key(partition, peer, message_id))
        return _Q.unpack(raw)[0] if raw else None

    def purged_between(self, partition: int, peer: str, after: int, before: int) -> bool:
        """Whether a Purge of ``peer`` was applied at an offset in ``(after, before)``."""
        prefix = purge_prefix(partition) + peer.encode() + b"\0"
        for _ in self.db.iterator(start=prefix + _Q.pack(after + 1),
                                    stop=prefix + _Q.pack(max(after + 1, before)),
                                    include_value=False):
            return True
        return False

    def queue_entries(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """``(kafka key, QueueEntry bytes)`` of queues partition ``partition``."""
        prefix = queue_prefix(partition)
        for key, value in self.db.iterator(prefix=prefix):
            yield key[len(prefix):], value

    def mark_complete(self) -> None:
        """The store's node no longer needs to rejoin (its rejoin epoch is committed, or none
        was needed): from now on the store opens as an existing one."""
        self.db.delete(_NEW_KEY, sync=True)
        self.created = False

    # ---- the node's last cut ------------------------------------------------------------------
    def load_cut(self) -> dict | None:
        """The cut and GC point saved by :meth:`save_cut` (``{ust, gc, ust_ms, epoch}``)."""
        raw = self.db.get(_CUT_KEY)
        return json.loads(raw) if raw else None

    def save_cut(self, ust: dict[str, int], gc: dict[str, int], ust_ms: int,
                 epoch: int = 0) -> None:
        """Persist the node's stable cut (tagged with the config epoch it was computed in)
        and GC point (they only rise across restarts)."""
        self.db.put(_CUT_KEY, json.dumps({"ust": ust, "gc": gc, "ust_ms": ust_ms,
                                          "epoch": epoch}).encode())

    # ---- loss ledger -----------------------------------------------------------------------
    def losses(self) -> list[dict]:
        """The loss ledger, oldest first."""
        return [json.loads(v) for _, v in self.db.iterator(prefix=b"L")]

    def gossip_losses(self, limit: int = 32) -> tuple[str, ...]:
        """The ledger as gossiped in NodeState: the newest ``limit`` entries (JSON, oldest
        first), then, when older ones are left out, one summary ``{"summary": true, "node",
        "entries", "offsets"}`` of the whole ledger. Bounded, whatever the ledger's size; the
        totals are recomputed only when the ledger changed (its last key)."""
        last = next(self.db.iterator(prefix=b"L", reverse=True, include_value=False), None)
        cached = getattr(self, "_loss_cache", None)
        if cached is not None and cached[0] == (last, limit):
            return cached[1]
        newest = [v for _, v in zip(range(limit), self.db.iterator(prefix=b"L", reverse=True,
                                                                   include_key=False),
                                    strict=False)]
        out = [json.dumps(json.loads(v), sort_keys=True) for v in reversed(newest)]
        if len(newest) == limit:
            count = offsets = 0
            for v in self.db.iterator(prefix=b"L", include_key=False):
                entry = json.loads(v)
                count += 1
                offsets += int(entry.get("end", 0)) - int(entry.get("start", 0))
            if count > limit:
                out.append(json.dumps({"summary": True, "node": self.node_id,
                                       "entries": count, "offsets": offsets}, sort_keys=True))
        result = tuple(out)
        self._loss_cache = ((last, limit), result)
        return result

    def next_loss_key(self) -> bytes:
        """Key for the next ledger entry."""
        last = 0
        for key in self.db.iterator(prefix=b"L", reverse=True, include_value=False):
            last = _Q.unpack(key[1:9])[0]
            break
        return b"L" + _Q.pack(last + 1)

    # ---- dead-letter ledger -----------------------------------------------------------------
    def dead_letters(self, limit: int | None = None) -> list[dict]:
        """Poison records recorded here because Kafka refused their dead-letter copy
        (``{topic, partition, offset, reason, error, size, sha256, ...}``), by tp and offset."""
        out: list[dict] = []
        for _, value in self.db.iterator(prefix=b"Z"):
            if limit is not None and len(out) >= limit:
                break
            out.append(json.loads(value))
        return out

    def dead_letter_count(self) -> int:
        """How many entries the dead-letter ledger holds."""
        return sum(1 for _ in self.db.iterator(prefix=b"Z", include_value=False))

    # ---- queues rebuild --------------------------------------------------------------------
    def reset_queues(self, partition: int) -> None:
        """Forget queues partition ``partition`` (entries, queue index, progress, map,
        position) in one batch, so it is rebuilt from a full read of the partition."""
        wb = self.db.write_batch()
        for prefix in (queue_prefix(partition), queue_index_prefix(partition)):
            for key in self.db.iterator(prefix=prefix, include_value=False):
                wb.delete(key)
        wb.delete(progress_key(partition))
        wb.delete(b"M" + _tp("queues", partition))
        wb.delete(b"P" + _tp("queues", partition))
        wb.write()
        self.maps.pop(("queues", partition), None)
        self.positions.pop(("queues", partition), None)
        self.applied_ms.pop(("queues", partition), None)

    def close(self) -> None:
        """Close the database."""
        if not self.db.closed:
            self.db.close()


def adopt_copy(db: plyvel.DB, node_id: str) -> None:
    """Make a copy of another node's store this node's: the records stay, the claims go.
    txlog maps become empty up to the copied position (a zero-length range marks where
    ingest resumes), so every copied range is a gap that backfill verifies against a peer
    by digest before claiming it; digests are recomputed from the records; the copy's cut,
    pins, loss ledger and queue state (rebuilt from Kafka) are dropped; the store is "new"
    until this node's rejoin is committed."""
    wb = db.write_batch(sync=True)
    for prefix in (b"M", b"P", b"Q", b"I", b"R", b"Y", b"L"):
        for key in db.iterator(prefix=prefix, include_value=False):
            wb.delete(key)
    for key, value in db.iterator(prefix=b"P" + TOPIC_CODES["txlog"]):
        pos, _ = _POS.unpack(value)
        wb.put(key, _POS.pack(pos, 0))
        wb.put(b"M" + key[1:], IntervalMap(0, 0, [[pos, pos]]).to_bytes())
    wb.delete(_CUT_KEY)
    wb.put(b"Xnode", node_id.encode())
    wb.put(_NEW_KEY, b"1")
    wb.write()
    rebuild_digests(db)
    db.put(b"Xformat", _FORMAT, sync=True)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
