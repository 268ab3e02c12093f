"""How the per-message queue state is laid out in Spark's state store, without Spark.

Three MapStates per state group (one txlog partition), each entry small and fixed-size:

========== ===================================== ==============================================
name       user key                              value
========== ===================================== ==============================================
entries    the queues key: peer NUL message_id   ``queued, offset, until, delivery_count``
           (UTF-8, binary)                       packed big-endian in 21 bytes (binary)
peer_meta  ``(peer,)``                           ``(clock, queued, head, tail, head_until)``
                                                 for each of the two expiry FIFOs
expiry     ``(peer, fifo, seq)``                 ``(until, ids)``: ids as a JSON list, UTF-8
========== ===================================== ==============================================

``entries`` is the hot map (two requests per Send), so it has the layout the JVM state server
converts fastest: one binary key and one binary value (measured 20-30 % cheaper per request
than typed columns).

:class:`StateMaps` is what the job's pandas step needs from a store (batched get, put,
remove, and a full scan for purges); :class:`MemoryMaps` implements it with dicts of the same
rows, for tests and models, counting operations.
"""

from __future__ import annotations

import copy
import json
import struct
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from spark_streaming.queue_state import Chunk, Entry, Fifo, PeerMeta, queue_key

__all__ = ["ENTRIES", "PEER_META", "EXPIRY", "SCHEMAS", "Row", "StateMaps", "MemoryMaps",
           "entry_key", "entry_key_of", "entry_row", "entry_of", "meta_row", "meta_of",
           "chunk_row", "chunk_of"]

ENTRIES, PEER_META, EXPIRY = "entries", "peer_meta", "expiry"
#: Spark DDL of each MapState: (user key schema, value schema).
SCHEMAS: dict[str, tuple[str, str]] = {
    ENTRIES: ("key binary", "value binary"),
    PEER_META: ("peer string",
                "clock long, queued long, dedup_head long, dedup_tail long, dedup_until long,"
                " early_head long, early_tail long, early_until long"),
    EXPIRY: ("peer string, fifo int, seq long", "until long, ids binary"),
}

Row = tuple


_ENTRY = struct.Struct(">?qqi")


def entry_key(peer: str, message_id: str) -> Row:
    """The ``entries`` key row of a message: its ``queues`` key, UTF-8."""
    return (queue_key(peer, message_id).encode(),)


def entry_key_of(row: Sequence[Any]) -> tuple[str, str]:
    """``(peer, message_id)`` of an ``entries`` key row."""
    peer, _, message_id = bytes(row[0]).decode().partition("\x00")
    return peer, message_id


def entry_row(entry: Entry) -> Row:
    """An :class:`Entry` as an ``entries`` value row."""
    return (_ENTRY.pack(entry.queued, entry.offset, entry.until, entry.delivery_count),)


def entry_of(row: Sequence[Any] | None) -> Entry | None:
    """The inverse of :func:`entry_row` (``None`` stays ``None``)."""
    if row is None:
        return None
    return Entry(*_ENTRY.unpack(bytes(row[0])))


def meta_row(meta: PeerMeta) -> Row:
    """A :class:`PeerMeta` as a ``peer_meta`` value row."""
    (d, e) = meta.fifos
    return (meta.clock, meta.queued, d.head, d.tail, d.head_until, e.head, e.tail, e.head_until)


def meta_of(row: Sequence[Any] | None) -> PeerMeta | None:
    """The inverse of :func:`meta_row`."""
    if row is None:
        return None
    v = [int(x) for x in row]
    return PeerMeta(v[0], v[1], (Fifo(v[2], v[3], v[4]), Fifo(v[5], v[6], v[7])))


def chunk_row(chunk: Chunk) -> Row:
    """A :class:`Chunk` as an ``expiry`` value row."""
    return (chunk.until, json.dumps(list(chunk.ids), separators=(",", ":")).encode())


def chunk_of(row: Sequence[Any] | None) -> Chunk | None:
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
