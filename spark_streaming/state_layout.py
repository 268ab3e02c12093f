"""How the per-message queue state is laid out in Spark's state store, without Spark.

Three MapStates per state group (one txlog partition), each entry small and fixed-size:

========== ===================================== ==============================================
name       user key                              value
========== ===================================== ==============================================
entries    ``(peer, message_id)``                ``(queued, offset, until, delivery_count)``
peer_meta  ``(peer,)``                           ``(clock, queued, head, tail, head_until)``
                                                 for each of the two expiry FIFOs
expiry     ``(peer, fifo, seq)``                 ``(until, ids)``: ids as a JSON list, UTF-8
========== ===================================== ==============================================

:class:`StateMaps` is what the job's pandas step needs from a store (batched get, put,
remove, and a full scan for purges); :class:`MemoryMaps` implements it with dicts of the same
rows, for tests and models, counting operations.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from typing import Protocol

from spark_streaming.queue_state import Chunk, Entry, Fifo, PeerMeta

__all__ = ["ENTRIES", "PEER_META", "EXPIRY", "SCHEMAS", "Row", "StateMaps", "MemoryMaps",
           "entry_row", "entry_of", "meta_row", "meta_of", "chunk_row", "chunk_of"]

ENTRIES, PEER_META, EXPIRY = "entries", "peer_meta", "expiry"
#: Spark DDL of each MapState: (user key schema, value schema).
SCHEMAS: dict[str, tuple[str, str]] = {
    ENTRIES: ("peer string, message_id string",
              "queued boolean, offset long, until long, delivery_count int"),
    PEER_META: ("peer string",
                "clock long, queued long, dedup_head long, dedup_tail long, dedup_until long,"
                " early_head long, early_tail long, early_until long"),
    EXPIRY: ("peer string, fifo int, seq long", "until long, ids binary"),
}

Row = tuple


def entry_row(entry: Entry) -> Row:
    """An :class:`Entry` as an ``entries`` value row."""
    return (entry.queued, entry.offset, entry.until, entry.delivery_count)


def entry_of(row: Sequence | None) -> Entry | None:
    """The inverse of :func:`entry_row` (``None`` stays ``None``)."""
    if row is None:
        return None
    return Entry(bool(row[0]), int(row[1]), int(row[2]), int(row[3]))


def meta_row(meta: PeerMeta) -> Row:
    """A :class:`PeerMeta` as a ``peer_meta`` value row."""
    (d, e) = meta.fifos
    return (meta.clock, meta.queued, d.head, d.tail, d.head_until, e.head, e.tail, e.head_until)


def meta_of(row: Sequence | None) -> PeerMeta | None:
    """The inverse of :func:`meta_row`."""
    if row is None:
        return None
    v = [int(x) for x in row]
    return PeerMeta(v[0], v[1], (Fifo(v[2], v[3], v[4]), Fifo(v[5], v[6], v[7])))


def chunk_row(chunk: Chunk) -> Row:
    """A :class:`Chunk` as an ``expiry`` value row."""
    return (chunk.until, json.dumps(list(chunk.ids), separators=(",", ":")).encode())


def chunk_of(row: Sequence | None) -> Chunk | None:
    """The inverse of :func:`chunk_row`."""
    if row is None:
        return None
    return Chunk(int(row[0]), tuple(json.loads(bytes(row[1]))))


class StateMaps(Protocol):
    """Batched access to the MapStates of one state group."""

    def get_many(self, name: str, keys: Sequence[Row]) -> list[Row | None]:
        """The value rows of ``keys`` (``None`` where absent), in order."""

    def put_many(self, name: str, items: Sequence[tuple[Row, Row]]) -> None:
        """Write ``(key, value)`` rows."""

    def remove_many(self, name: str, keys: Sequence[Row]) -> None:
        """Remove ``keys`` (absent keys are fine)."""

    def scan(self, name: str) -> Iterator[tuple[Row, Row]]:
        """Every ``(key, value)`` of the map (for purges: the whole group)."""


class MemoryMaps:
    """:class:`StateMaps` on dicts (tests, models); ``ops`` counts keys read/written/removed
    and ``scanned`` the rows full scans returned."""

    def __init__(self, data: dict[str, dict[Row, Row]] | None = None) -> None:
        self.data: dict[str, dict[Row, Row]] = data or {n: {} for n in SCHEMAS}
        self.ops = 0
        self.scanned = 0

    def get_many(self, name: str, keys: Sequence[Row]) -> list[Row | None]:
        self.ops += len(keys)
        table = self.data[name]
        return [table.get(tuple(k)) for k in keys]

    def put_many(self, name: str, items: Sequence[tuple[Row, Row]]) -> None:
        self.ops += len(items)
        for key, value in items:
            self.data[name][tuple(key)] = tuple(value)

    def remove_many(self, name: str, keys: Sequence[Row]) -> None:
        self.ops += len(keys)
        for key in keys:
            self.data[name].pop(tuple(key), None)

    def scan(self, name: str) -> Iterator[tuple[Row, Row]]:
        rows = list(self.data[name].items())
        self.scanned += len(rows)
        return iter(rows)

    def snapshot(self) -> "MemoryMaps":
        """A deep copy (what a restarted job would read back from its checkpoint)."""
        return MemoryMaps(copy.deepcopy(self.data))

    def size(self) -> int:
        """Number of rows over every map."""
        return sum(len(t) for t in self.data.values())
