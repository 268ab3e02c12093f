"""How the per-message queue state is laid out in Spark's state store, without Spark.

One MapState per state group (one txlog partition), binary key -> binary value; the first
byte of a key says what the row is:

====================================== ================================================
key                                    value
====================================== ================================================
``e`` peer NUL message_id (UTF-8)      an :class:`Entry`: queued, offset, until,
                                       delivery_count, packed big-endian (21 bytes);
                                       an early failure adds its terminal flag (1 byte)
                                       and its last reason (UTF-8, at most
                                       :data:`REASON_BYTES`)
``m`` peer                             a :class:`PeerMeta`: clock, queued, then head,
                                       tail and head_until of each expiry FIFO (64 bytes)
``x`` peer NUL fifo seq (1 + 8 bytes)  a :class:`Chunk`: until (8 bytes), ids (JSON)
====================================== ================================================

One state variable, not three, because PySpark registers every state variable again in
every task of every micro-batch (encoders built, column family opened): measured at 0.2-0.9 s
per variable and task on 2 busy cores. Binary keys and values are also what the JVM state
server converts fastest (measured 20-30 % cheaper per request than typed columns).

:class:`StateMaps` is what the job's pandas step needs from a store (batched get, put and
remove, and a full scan for purges); :class:`MemoryMaps` implements it with a dict of the
same bytes, for tests and models, counting operations.
"""

from __future__ import annotations

import copy
import json
import struct
from collections.abc import Iterator, Sequence
from typing import Protocol

from tidemark.log.queue_state import Chunk, Entry, Fifo, PeerMeta, queue_key

__all__ = ["STATE_NAME", "KEY_SCHEMA", "VALUE_SCHEMA", "StateMaps", "MemoryMaps",
           "entry_key", "split_entry_key", "meta_key", "chunk_key", "entry_value", "entry_of",
           "meta_value", "meta_of", "chunk_value", "chunk_of"]

#: The MapState's name and its Spark DDL (user key, value).
STATE_NAME, KEY_SCHEMA, VALUE_SCHEMA = "queue_state", "key binary", "value binary"
_ENTRY, _META, _CHUNK_VALUE = struct.Struct(">?qqi"), struct.Struct(">8q"), struct.Struct(">q")
_FLOOR = struct.Struct(">q")
_CHUNK_KEY = struct.Struct(">BQ")
#: An early failure's reason is kept in the state up to this many bytes.
REASON_BYTES = 1000


def entry_key(peer: str, message_id: str) -> bytes:
    """Key of a message's entry: ``e`` + its ``queues`` key."""
    return b"e" + queue_key(peer, message_id).encode()


def split_entry_key(key: bytes) -> tuple[str, str] | None:
    """``(peer, message_id)`` of an entry key, None for other keys."""
    if key[:1] != b"e":
        return None
    peer, _, message_id = key[1:].decode().partition("\x00")
    return peer, message_id


def meta_key(peer: str) -> bytes:
    """Key of a peer's meta."""
    return b"m" + peer.encode()


def chunk_key(peer: str, fifo: int, seq: int) -> bytes:
    """Key of chunk ``seq`` of a peer's expiry FIFO ``fifo``."""
    return b"x" + peer.encode() + b"\x00" + _CHUNK_KEY.pack(fifo, seq)


def entry_value(entry: Entry) -> bytes:
    """An :class:`Entry` as a value."""
    fixed = _ENTRY.pack(entry.queued, entry.offset, entry.until, entry.delivery_count)
    if not entry.failed_early:
        return fixed
    reason = entry.reason.encode("utf-8")[:REASON_BYTES].decode("utf-8", "ignore")
    return fixed + (b"\x01" if entry.terminal else b"\x00") + reason.encode("utf-8")


def entry_of(value: bytes | None) -> Entry | None:
    """The inverse of :func:`entry_value` (``None`` stays ``None``; an entry stored before
    early failures were kept reads as it was)."""
    if value is None:
        return None
    if len(value) == _ENTRY.size:
        return Entry(*_ENTRY.unpack(value))
    queued, offset, until, count = _ENTRY.unpack_from(value)
    return Entry(queued, offset, until, count, value[_ENTRY.size] == 1,
                 value[_ENTRY.size + 1:].decode("utf-8"))


def meta_value(meta: PeerMeta) -> bytes:
    """A :class:`PeerMeta` as a value."""
    (d, e) = meta.fifos
    value = _META.pack(meta.clock, meta.queued, d.head, d.tail, d.head_until,
                       e.head, e.tail, e.head_until)
    # the Purge floor only when there is one (a meta written before has none)
    return value + _FLOOR.pack(meta.purged_below) if meta.purged_below >= 0 else value


def meta_of(value: bytes | None) -> PeerMeta | None:
    """The inverse of :func:`meta_value`."""
    if value is None:
        return None
    v = _META.unpack_from(value)
    floor = _FLOOR.unpack_from(value, _META.size)[0] if len(value) > _META.size else -1
    return PeerMeta(v[0], v[1], (Fifo(v[2], v[3], v[4]), Fifo(v[5], v[6], v[7])), floor)


def chunk_value(chunk: Chunk) -> bytes:
    """A :class:`Chunk` as a value."""
    return _CHUNK_VALUE.pack(chunk.until) + json.dumps(list(chunk.ids),
                                                       separators=(",", ":")).encode()


def chunk_of(value: bytes | None) -> Chunk | None:
    """The inverse of :func:`chunk_value`."""
    if value is None:
        return None
    return Chunk(_CHUNK_VALUE.unpack_from(value)[0], tuple(json.loads(value[8:])))


class StateMaps(Protocol):
    """Batched access to the one MapState of a state group (keys and values are bytes)."""

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The values of ``keys`` (``None`` where absent), in order."""

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Write ``(key, value)`` pairs."""

    def remove_many(self, keys: Sequence[bytes]) -> None:
        """Remove ``keys`` (absent keys are fine)."""

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` of the group (for purges)."""


class MemoryMaps:
    """:class:`StateMaps` on a dict (tests, models); ``ops`` counts keys read, written or
    removed, ``calls`` batched calls, and ``scanned`` the rows full scans returned."""

    def __init__(self, data: dict[bytes, bytes] | None = None) -> None:
        self.data: dict[bytes, bytes] = data if data is not None else {}
        self.ops = self.calls = self.scanned = 0

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self.ops, self.calls = self.ops + len(keys), self.calls + 1
        return [self.data.get(k) for k in keys]

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        self.ops, self.calls = self.ops + len(items), self.calls + 1
        self.data.update(items)

    def remove_many(self, keys: Sequence[bytes]) -> None:
        self.ops, self.calls = self.ops + len(keys), self.calls + 1
        for key in keys:
            self.data.pop(key, None)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        rows = list(self.data.items())
        self.scanned += len(rows)
        return iter(rows)

    def snapshot(self) -> MemoryMaps:
        """A deep copy (what a restarted job would read back from its checkpoint)."""
        return MemoryMaps(copy.deepcopy(self.data))

    def entries(self) -> dict[tuple[str, str], Entry]:
        """Every message entry, by ``(peer, message_id)``."""
        out = {}
        for key, value in self.data.items():
            where = split_entry_key(key)
            entry = entry_of(value) if where else None
            if where is not None and entry is not None:
                out[where] = entry
        return out

    def metas(self) -> dict[str, PeerMeta]:
        """Every peer meta, by peer."""
        out = {}
        for key, value in self.data.items():
            meta = meta_of(value) if key[:1] == b"m" else None
            if meta is not None:
                out[key[1:].decode()] = meta
        return out

    def chunk_count(self, peer: str | None = None) -> int:
        """Number of expiry chunks (of ``peer`` only, if given)."""
        prefix = b"x" if peer is None else b"x" + peer.encode() + b"\x00"
        return sum(1 for k in self.data if k.startswith(prefix))
