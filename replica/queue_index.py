"""The queue index: each peer's queue in txlog order, kept with the queue entries.

Ingest applies ``queues`` records through :func:`put_entry` (a QueueEntry upsert) and
:func:`delete_entry` (a tombstone). Both write the entry and its index entry
(:func:`tidemark.replica.store.queue_index_key`: partition, peer, txlog offset -> queue key and the
entry, :func:`index_value`) into the
same LevelDB write batch, so the index never disagrees with the entries after a crash. A
tombstone carries no value, so the old entry (from the batch's pending changes, else the
store) says which index entry to drop. :func:`read_queue` reads one batch of a peer's queue
in txlog order from a LevelDB snapshot, so a replay never holds the whole queue;
:func:`read_queue_framed` reads it already framed as the ``Replay`` stream sends it.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

from tidemark.gossip.replay import ENTRY_RECORD, entry_rows
from tidemark.log.exceptions import CodecError
from tidemark.log.wire import default_codec
from tidemark.replica.batch import Batch
from tidemark.replica.keys import queue_index_key, queue_index_prefix, queue_prefix
from tidemark.replica.store import Store

__all__ = ["put_entry", "delete_entry", "indexed", "read_queue", "read_queue_framed",
           "Framed", "entry_position", "index_value"]

log = logging.getLogger(__name__)
_Q = struct.Struct(">Q")
_H = struct.Struct(">H")
#: An index value ``\0 <2-byte length> <queue key> <entry>`` carries the entry as a replay
#: streams it (its replay row; QueueEntry bytes if it has none), so a replay reads a peer's
#: queue with one iterator; a value without it (a store written before) is the queue key
#: alone (a queue key never starts with NUL: the peer id is not empty and holds no NUL),
#: and the entry is read from the queue key.
_INLINE = b"\0"


def entry_position(value: bytes, decode: Callable = default_codec().decode
                   ) -> tuple[str, int] | None:
    """``(peer, txlog offset)`` of stored QueueEntry bytes, or None if they do not decode."""
    try:
        rec = decode(value).record
        return str(rec["peer"]), int(rec["txlog_offset"])
    except (CodecError, KeyError, TypeError, ValueError):
        return None


def indexed(batch: Batch, partition: int, key: bytes) -> tuple[str, int] | None:
    """Where the index has queue ``key`` now: ``(peer, txlog offset)``, counting the
    batch's own pending upserts and deletions; None if the key is not queued."""
    pending = batch.queue_keys
    slot = (partition, key)
    if slot in pending:
        return pending[slot]
    old = batch.store.db.get(queue_prefix(partition) + key)
    if old is None:
        return None
    where = entry_position(old)
    if where is None:
        log.warning("queues/%d: stored entry %r does not decode; its index entry (if any)"
                    " is left", partition, key)
    return where


def put_entry(batch: Batch, partition: int, key: bytes, value: bytes, peer: str,
              offset: int, row: bytes | None = None) -> None:
    """Upsert QueueEntry ``value`` under ``key`` with its index entry, in ``batch``. The
    index entry carries ``row`` (the entry's replay row,
    :mod:`tidemark.log.wire.replay_rows`), or the QueueEntry bytes when there is none."""
    old = indexed(batch, partition, key)
    if old is not None and old != (peer, offset):
        batch.wb.delete(queue_index_key(partition, *old))
    batch.wb.put(queue_prefix(partition) + key, value)
    batch.wb.put(queue_index_key(partition, peer, offset),
                 b"".join((_INLINE, _H.pack(len(key)), key, value if row is None else row)))
    batch.queue_keys[(partition, key)] = (peer, offset)


def delete_entry(batch: Batch, partition: int, key: bytes) -> None:
    """Apply a tombstone: delete the entry under ``key`` and its index entry, in ``batch``."""
    old = indexed(batch, partition, key)
    batch.wb.delete(queue_prefix(partition) + key)
    if old is not None:
        batch.wb.delete(queue_index_key(partition, *old))
    batch.queue_keys[(partition, key)] = None


def index_value(value: bytes) -> tuple[bytes, bytes | None]:
    """``(queue key, entry)`` of a stored index value: the entry's replay row or QueueEntry
    bytes; None in a value written before entries were kept in the index (read it under the
    queue key)."""
    if value[:1] == _INLINE:
        n = _H.unpack_from(value, 1)[0]
        return value[3:3 + n], value[3 + n:]
    return value, None


def read_queue(store: Store, partition: int, peer: str, after: int, end: int, limit: int
               ) -> tuple[list[tuple[int, bytes]], int | None]:
    """Up to ``limit`` entries of ``peer``'s queue with txlog offsets in ``(after, end)``,
    in txlog order, as ``(offset, entry)`` (a replay row, or QueueEntry bytes); plus the last
    offset read from the index (None when nothing is left). One LevelDB snapshot: index and
    entries agree. (:func:`read_queue_framed`, unframed.)"""
    chunks, last = read_queue_framed(store, partition, peer, after, end, limit, 1 << 62)
    return [row for _, body in chunks for row in entry_rows(body, 0)], last


#: A chunk of a replay: the txlog offsets of its entries and their bytes as an ``E`` message
#: carries them (:data:`tidemark.gossip.replay.ENTRY_RECORD` + the entry, each).
Framed = tuple[list[int], bytes]


def read_queue_framed(store: Store, partition: int, peer: str, after: int, end: int,
                      limit: int, max_bytes: int,
                      convert: Callable[[int, bytes], bytes] | None = None
                      ) -> tuple[list[Framed], int | None]:
    """:func:`read_queue`, framed for the wire in the same pass: the entries in chunks of at
    most ``max_bytes`` (an entry larger than that alone), plus the last offset read;
    ``convert(offset, entry)``, if given, is what is sent of each entry. One loop per entry
    and one join per chunk: reading, chunking and framing entry by entry in three passes
    cost a replica about a third of its replay-time CPU."""
    prefix = queue_index_prefix(partition, peer)
    chunks: list[Framed] = []
    last: int | None = None
    if end <= after + 1 or limit <= 0:
        return chunks, None
    snap = store.db.snapshot()
    try:
        qprefix, unpack, size = queue_prefix(partition), _Q.unpack_from, len(prefix)
        head, frame, inline = _H.unpack_from, ENTRY_RECORD.pack, _INLINE
        offsets: list[int] = []
        parts: list[bytes] = []
        nbytes = count = 0
        for ikey, ivalue in snap.iterator(start=prefix + _Q.pack(after + 1),
                                          stop=prefix + _Q.pack(end)):
            last = unpack(ikey, size)[0]
            if ivalue[:1] == inline:  # index_value, inline (the hot path)
                value = ivalue[3 + head(ivalue, 1)[0]:]
            else:
                got = snap.get(qprefix + ivalue)
                if got is None:
                    continue
                value = got
            if convert is not None:
                value = convert(last, value)
            n = len(value) + ENTRY_RECORD.size
            if offsets and nbytes + n > max_bytes:
                chunks.append((offsets, b"".join(parts)))
                offsets, parts, nbytes = [], [], 0
            offsets.append(last)
            parts.append(frame(last, len(value)))
            parts.append(value)
            nbytes += n
            count += 1
            if count >= limit:
                break
        if offsets:
            chunks.append((offsets, b"".join(parts)))
    finally:
        snap.close()
    return chunks, last
