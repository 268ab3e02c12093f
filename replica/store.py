"""The node's LevelDB store (plyvel): records, indexes, interval maps and positions.

Everything one ingest step changes — records, indexes, the interval map and the position
of each touched partition — goes into one LevelDB write batch, so a kill -9 at any moment
leaves a store that resumes with no gap and no duplicate. In-memory maps are replaced only
after the batch is written.

The key layout is :mod:`tidemark.replica.keys`, the batch :mod:`tidemark.replica.batch`, digests per
backfill range :mod:`tidemark.replica.digests`, adopting a copied folder
:mod:`tidemark.replica.adoption`; their public names are re-exported here.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plyvel

from tidemark.gossip.interval_map import IntervalMap
from tidemark.replica.adoption import ADOPT_FILE, FORMAT, adopt_copy
from tidemark.replica.batch import Batch
from tidemark.replica.digests import range_digest, rebuild_digests
from tidemark.replica.exceptions import StoreError
from tidemark.replica.keys import (
    CUT_KEY,
    NEW_KEY,
    PIN_PREFIX,
    POSITION,
    TOPIC_CODES,
    ack_key,
    ack_prefix,
    data_key,
    data_prefix,
    deadletter_key,
    map_key,
    pin_key,
    position_key,
    progress_key,
    queue_index_key,
    queue_index_prefix,
    queue_prefix,
    topic_of,
    tp_name,
)

__all__ = ["Store", "StoreOptions", "Batch", "TOPIC_CODES", "tp_name", "data_key", "data_prefix",
           "ack_key", "ack_prefix", "queue_prefix", "progress_key",
           "deadletter_key",
           "queue_index_prefix", "queue_index_key", "PIN_PREFIX", "pin_key", "ADOPT_FILE",
           "adopt_copy"]

_Q = struct.Struct(">Q")


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
    bloom_bits: int = 10      # bloom filter bits per key (0: none): a get of an absent key
    #                           (an Ack index lookup for a Send not acked yet) reads no block
    snappy: int = 0           # 1: snappy-compress table blocks (LevelDB's default; see below)

    def leveldb(self) -> dict[str, Any]:
        """plyvel.DB keyword arguments. Blocks are not compressed unless ``snappy``:
        compressing every table LevelDB writes (each record is rewritten by several
        compactions) was a quarter of the replica nodes' CPU during a replay (perf,
        docs/replica.md), for a store on disk that only holds the records not released."""
        out: dict[str, Any] = {"lru_cache_size": self.cache_mb << 20,
                               "write_buffer_size": self.write_buffer_mb << 20,
                               "max_open_files": self.open_tables + 10,
                               "max_file_size": self.table_file_mb << 20,
                               "compression": "snappy" if self.snappy else None}
        if self.bloom_bits:
            out["bloom_filter_bits"] = self.bloom_bits
        return out


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
            wb.put(b"Xformat", FORMAT)
            wb.put(NEW_KEY, b"1")
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
        if self.db.get(b"Xformat") != FORMAT:  # written before digests per range
            rebuild_digests(self.db)
            self.db.put(b"Xformat", FORMAT, sync=True)
        #: True while the store is new: created empty, and its node has not yet committed
        #: the rejoin that makes it stop counting toward the cut (see :meth:`mark_complete`).
        self.created = self.db.get(NEW_KEY) is not None
        self.maps: dict[tuple[str, int], IntervalMap] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.applied_ms: dict[tuple[str, int], int] = {}
        #: moves on each commit that wrote a loss ledger entry (:meth:`gossip_losses`' cache)
        self.ledger_version = 0
        try:
            for key, value in self.db.iterator(prefix=b"M"):
                self.maps[topic_of(key[1:])] = IntervalMap.from_bytes(value)
            for key, value in self.db.iterator(prefix=b"P"):
                pos, ms = POSITION.unpack(value)
                self.positions[topic_of(key[1:])] = pos
                self.applied_ms[topic_of(key[1:])] = ms
        except (plyvel.Error, struct.error) as exc:
            self.db.close()
            raise StoreError(f"LevelDB store {self.path} is corrupt ({_short(exc)})") from None

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
        backfill ranges from their stored digests, see :mod:`tidemark.replica.digests`)."""
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

    def queue_entries(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """``(kafka key, QueueEntry bytes)`` of queues partition ``partition``."""
        prefix = queue_prefix(partition)
        for key, value in self.db.iterator(prefix=prefix):
            yield key[len(prefix):], value

    def mark_complete(self) -> None:
        """The store's node no longer needs to rejoin (its rejoin epoch is committed, or none
        was needed): from now on the store opens as an existing one."""
        self.db.delete(NEW_KEY, sync=True)
        self.created = False

    # ---- the node's last cut ------------------------------------------------------------------
    def load_cut(self) -> dict | None:
        """The cut and GC point saved by :meth:`save_cut` (``{ust, gc, ust_ms, epoch}``)."""
        raw = self.db.get(CUT_KEY)
        return json.loads(raw) if raw else None

    def save_cut(self, ust: dict[str, int], gc: dict[str, int], ust_ms: int,
                 epoch: int = 0) -> None:
        """Persist the node's stable cut (tagged with the config epoch it was computed in)
        and GC point (they only rise across restarts)."""
        self.db.put(CUT_KEY, json.dumps({"ust": ust, "gc": gc, "ust_ms": ust_ms,
                                          "epoch": epoch}).encode())

    # ---- loss ledger -----------------------------------------------------------------------
    def losses(self) -> list[dict]:
        """The loss ledger, oldest first."""
        return [json.loads(v) for _, v in self.db.iterator(prefix=b"L")]

    def gossip_losses(self, limit: int = 32) -> tuple[str, ...]:
        """The ledger as gossiped in NodeState: the newest ``limit`` entries (JSON, oldest
        first), then, when older ones are left out, one summary ``{"summary": true, "node",
        "entries", "offsets"}`` of the whole ledger. Bounded, whatever the ledger's size; the
        ledger is read again only when a batch wrote to it (:attr:`ledger_version`): a node
        publishes its state tens of times a second under load."""
        cached = getattr(self, "_loss_cache", None)
        if cached is not None and cached[0] == (self.ledger_version, limit):
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
        self._loss_cache = ((self.ledger_version, limit), result)
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

    # ---- queues rebuild --------------------------------------------------------------------
    def reset_queues(self, partition: int) -> None:
        """Forget queues partition ``partition`` (entries, queue index, progress, map,
        position) in one batch, so it is rebuilt from a full read of the partition."""
        wb = self.db.write_batch()
        for prefix in (queue_prefix(partition), queue_index_prefix(partition)):
            for key in self.db.iterator(prefix=prefix, include_value=False):
                wb.delete(key)
        wb.delete(progress_key(partition))
        wb.delete(map_key("queues", partition))
        wb.delete(position_key("queues", partition))
        wb.write()
        self.maps.pop(("queues", partition), None)
        self.positions.pop(("queues", partition), None)
        self.applied_ms.pop(("queues", partition), None)

    def close(self) -> None:
        """Close the database."""
        if not self.db.closed:
            self.db.close()


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
