"""One atomic write to the store: records (with their range digests), indexes, and the
map/position updates of the touched partitions, published only once written."""

from __future__ import annotations

import struct
from contextlib import AbstractContextManager
from typing import Any, Protocol

from tidemark.gossip.interval_map import IntervalMap, record_hash
from tidemark.replica.digests import RANGE_BITS, merge_deltas
from tidemark.replica.keys import POSITION, data_key, map_key, position_key

__all__ = ["Batch", "StoreState"]

_HQ = struct.Struct(">HQ")


class StoreState(Protocol):
    """What a :class:`Batch` reads and updates of its :class:`~tidemark.replica.store.Store`
    (the store commits its batches; the batch does not import it)."""

    db: Any
    maps: dict[tuple[str, int], IntervalMap]
    positions: dict[tuple[str, int], int]
    applied_ms: dict[tuple[str, int], int]
    ledger_version: int  # moves on each commit that wrote a loss ledger entry

    @property
    def lock(self) -> AbstractContextManager[Any]:
        """Serializes the store's commits."""

    def map(self, topic: str, partition: int) -> IntervalMap:
        """The current interval map of ``topic``/``partition``."""

    def position(self, topic: str, partition: int) -> int | None:
        """The consumer position of ``topic``/``partition``, None if unknown."""


class Batch:
    """One atomic write: records plus the map/position updates of the touched partitions."""

    def __init__(self, store: StoreState, sync: bool = False) -> None:
        self.store = store
        self.wb = store.db.write_batch(sync=sync)
        self.maps: dict[tuple[str, int], IntervalMap] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.applied_ms: int = 0
        self.ledger = False  # a loss ledger entry was put (the store's ledger version moves)
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
        if key[:1] == b"L":
            self.ledger = True
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
            self.wb.put(map_key(topic, k), m.to_bytes())
        for (topic, k), pos in self.positions.items():
            self.wb.put(position_key(topic, k), POSITION.pack(pos, self.applied_ms))
        self.wb.write()
        if self.ledger:
            self.store.ledger_version += 1
        self.store.maps.update(self.maps)
        for key, pos in self.positions.items():
            self.store.positions[key] = pos
            self.store.applied_ms[key] = self.applied_ms
