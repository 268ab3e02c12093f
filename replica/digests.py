"""Digests per backfill range, kept in the store beside the records.

txlog offsets of a partition are cut into aligned *backfill ranges* of :data:`RANGE` offsets. For
each range that holds records the store keeps ``H k range`` -> ``(xor of record hashes, count, value
bytes)``; every batch that puts or deletes a txlog record updates it in the same LevelDB write batch
(:meth:`tidemark.replica.store.Batch.put_record`,
:meth:`~tidemark.replica.store.Batch.delete_record`). The digest of any ``[start, end)`` is the XOR
of the stored digests of the whole ranges inside it plus the hashes of the records at its ragged
edges, so backfill compares aligned chunks without reading their records.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping

import plyvel

from tidemark.gossip.interval_map import record_hash

__all__ = ["RANGE", "RANGE_BITS", "DIGEST_PREFIX", "digest_key", "range_of", "RangeDigest",
           "merge_deltas", "range_digest", "rebuild_digests"]

RANGE_BITS = 12
#: Offsets per backfill range (backfill chunks are aligned to it).
RANGE = 1 << RANGE_BITS
DIGEST_PREFIX = b"H"
_H = struct.Struct(">H")
_Q = struct.Struct(">Q")
_DIG = struct.Struct(">QQQ")
_MASK = (1 << 64) - 1

#: ``(xor, count, value bytes)``
RangeDigest = tuple[int, int, int]


def digest_key(partition: int, index: int) -> bytes:
    """Key of the digest of backfill range ``index`` (offsets ``index * RANGE`` onwards)."""
    return DIGEST_PREFIX + _H.pack(partition) + _Q.pack(index)


def range_of(offset: int) -> int:
    """The backfill range holding ``offset``."""
    return offset >> RANGE_BITS


def merge_deltas(db: plyvel.DB, wb: object, deltas: Mapping[tuple[int, int], list[int]]) -> None:
    """Add ``{(partition, range): [xor, count, bytes]}`` to the stored digests, writing the
    results into ``wb`` (the caller holds the store's commit lock)."""
    for (k, index), (x, n, size) in deltas.items():
        key = digest_key(k, index)
        raw = db.get(key)
        ox, on, osize = _DIG.unpack(raw) if raw else (0, 0, 0)
        nx, nn, nsize = ox ^ x, on + n, osize + size
        if nn <= 0:
            wb.delete(key)  # type: ignore[attr-defined]
        else:
            wb.put(key, _DIG.pack(nx & _MASK, nn, max(0, nsize)))  # type: ignore[attr-defined]


def _stored(db: plyvel.DB, partition: int, first: int, stop: int
            ) -> Iterator[tuple[int, RangeDigest]]:
    """Stored digests of ranges ``[first, stop)`` that hold records, by range index."""
    for key, value in db.iterator(start=digest_key(partition, first),
                                  stop=digest_key(partition, stop)):
        yield _Q.unpack(key[3:11])[0], _DIG.unpack(value)


def range_digest(db: plyvel.DB, records: Callable[[int, int, int], Iterator[tuple[int, bytes]]],
                 partition: int, start: int, end: int, max_bytes: int | None = None
                 ) -> tuple[int, int, int]:
    """``(digest, count, stop)`` of the stored records of ``partition`` in ``[start, stop)``:
    ``stop`` is ``end``, or with ``max_bytes`` the offset of the first record that would take
    the value bytes past it (at least one record is always taken). Whole backfill ranges
    come from their stored digests; only ragged edges (and a range that would pass the
    byte bound) are read record by record."""
    acc, n, size = 0, 0, 0

    def scan(lo: int, hi: int) -> int | None:
        nonlocal acc, n, size
        for off, value in records(partition, lo, hi):
            if max_bytes is not None and n and size + len(value) > max_bytes:
                return off
            acc ^= record_hash(off, value)
            n += 1
            size += len(value)
        return None

    first = -(-start // RANGE)   # first whole range inside [start, end)
    last = end >> RANGE_BITS     # ranges [first, last) are whole
    if first >= last:
        stop = scan(start, end)
        return acc, n, end if stop is None else stop
    stop = scan(start, first << RANGE_BITS)
    if stop is not None:
        return acc, n, stop
    for index, (x, count, bytes_) in _stored(db, partition, first, last):
        if max_bytes is not None and size + bytes_ > max_bytes:  # n == 0 too: one record only
            stop = scan(index << RANGE_BITS, (index + 1) << RANGE_BITS)
            if stop is not None:
                return acc, n, stop
            continue
        acc ^= x
        n += count
        size += bytes_
    stop = scan(last << RANGE_BITS, end)
    return acc, n, end if stop is None else stop


def rebuild_digests(db: plyvel.DB, data_prefix: bytes = b"Dt") -> int:
    """Recompute every stored digest from the records (stores written before digests, and
    adopted copies, whose digests are another node's word); returns the ranges written."""
    wb = db.write_batch()
    for key in db.iterator(prefix=DIGEST_PREFIX, include_value=False):
        wb.delete(key)
    acc: dict[tuple[int, int], list[int]] = {}
    for key, value in db.iterator(prefix=data_prefix):
        k, off = struct.unpack(">HQ", key[2:12])
        d = acc.setdefault((k, range_of(off)), [0, 0, 0])
        d[0] ^= record_hash(off, value)
        d[1] += 1
        d[2] += len(value)
    for (k, index), (x, n, size) in acc.items():
        wb.put(digest_key(k, index), _DIG.pack(x, n, size))
    wb.write()
    return len(acc)
