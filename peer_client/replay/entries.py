"""Replayed entries to the envelopes of the messages they hold (the peer's replay reader)."""

from __future__ import annotations

import logging
import struct

from tidemark.gossip.replay import ENTRY_RECORD, read_rows
from tidemark.log.exceptions import CodecError
from tidemark.log.wire import (
    HEAD_SIZE,
    MARKER,
    ROW_HEAD,
    ROW_TAG,
    RecordReader,
    compile_tuple_reader,
)
from tidemark.peer_client.columns import Columns
from tidemark.peer_client.records import Envelope, peer_codec

__all__ = ["EntryReader"]

log = logging.getLogger("peer_client.replay")

#: An ``E`` message's entry head and a replay row's head read by one call: txlog offset,
#: entry length, then the row's tag and :data:`ROW_HEAD`.
_FRAMED_ROW = struct.Struct(">" + ENTRY_RECORD.format.lstrip("<>!=@") + "2s"
                            + ROW_HEAD.format.lstrip("<>!=@"))
_ROW_FIXED = HEAD_SIZE  # a row's bytes before its four fields

_ENTRY_FIELDS = ["peer", "message_id", "sender", "message_type", "payload", "timestamp_ms",
                 "txlog_partition", "txlog_offset", "delivery_count"]


class EntryReader:
    """Replayed entries to the :class:`Envelope` of each message. A replay row
    (:mod:`tidemark.log.wire.replay_rows`, what replicas store now) is read with one ``struct``
    call;
    QueueEntry bytes of the current schema field by field (no dict); any other (an older
    writer schema) through the codec."""

    def __init__(self, environment: str, partition: int) -> None:
        codec = peer_codec()
        self.environment, self.partition = environment, partition
        self._records = RecordReader(codec, ("QueueEntry",))
        schema = codec.schema("QueueEntry")
        names = [f["name"] for f in schema["fields"]]
        self._header = MARKER + codec.fingerprint_of("QueueEntry")
        self._read = compile_tuple_reader(schema) if names == _ENTRY_FIELDS else None
        self._names: dict[bytes, str] = {}  # sender and type names seen (few, repeated)
        self.damaged = 0

    @property
    def fast(self) -> bool:
        """Whether current-schema values are read without the codec."""
        return self._read is not None

    def envelopes(self, rows: list[tuple[int, bytes]]) -> list[Envelope]:
        """The messages of ``(txlog offset, entry)`` pairs, in order. An entry that does not
        decode is logged, counted in :attr:`damaged` and left out: it stays in the queue (it
        is never acked), so the next replay offers it again."""
        out: list[Envelope] = []
        append, unpack, names, env = out.append, ROW_HEAD.unpack_from, self._names, \
            self.environment
        for offset, value in rows:
            if value[:2] == ROW_TAG:  # log.wire.replay_rows.decode_row, inline (the hot path;
                try:                   # tests/property/wire/test_replay_rows.py keeps them equal)
                    ts, _, part, count, a, b, c, d = unpack(value, 2)
                    p = HEAD_SIZE
                    q = p + a
                    mid = value[p:q].decode()
                    raw = value[q:q + b]
                    sender = names.get(raw) or self._name(raw)
                    q += b
                    raw = value[q:q + c]
                    mtype = names.get(raw) or self._name(raw)
                    q += c
                    if q + d == len(value):
                        append(Envelope(mid, sender, mtype, value[q:], ts, True, env, count,
                                        True, part, offset))
                        continue
                except (struct.error, UnicodeDecodeError):
                    pass
                self._damaged(offset, "a damaged replay row")
                continue
            try:
                append(self.envelope(value, offset))
            except CodecError as exc:
                self._damaged(offset, str(exc))
        return out

    def read_message(self, msg: bytes, pos: int
                     ) -> tuple[Columns | list[tuple[int, bytes]], int, int]:
        """A :data:`~tidemark.gossip.replay.ChunkReader` of the ``Replay`` stream: the entries
        of ``E`` message ``msg`` from byte ``pos`` straight into :class:`Columns` (the lean
        path: no pair or slice per entry first), or, unless every entry is a well-formed
        replay row of this partition, as ``(offset, entry)`` pairs for :meth:`envelopes`."""
        cols = self._message_columns(msg, pos)
        if cols is None:
            return read_rows(msg, pos)
        n = len(cols.offsets)
        return cols, n, cols.offsets[-1] if n else -1

    def _message_columns(self, msg: bytes, pos: int) -> Columns | None:
        offsets: list[int] = []
        ids: list[str] = []
        senders: list[str] = []
        types: list[str] = []
        payloads: list[bytes] = []
        stamps: list[int] = []
        counts: list[int] = []
        unpack, head, record = _FRAMED_ROW.unpack_from, _FRAMED_ROW.size, ENTRY_RECORD.size
        names, partition, tag, end = self._names, self.partition, ROW_TAG, len(msg)
        try:
            while pos < end:  # as envelopes() reads a row, without the Envelope
                off, n, got, ts, _, part, count, a, b, c, d = unpack(msg, pos)
                # a row is whole when its four fields fill its frame exactly
                if got != tag or part != partition or _ROW_FIXED + a + b + c + d != n:
                    return None
                q = pos + head
                pos += record + n
                ids.append(msg[q:q + a].decode())
                q += a
                raw = msg[q:q + b]
                senders.append(names.get(raw) or self._name(raw))
                q += b
                raw = msg[q:q + c]
                types.append(names.get(raw) or self._name(raw))
                q += c
                payloads.append(msg[q:pos])
                offsets.append(off)
                stamps.append(ts)
                counts.append(count)
        except (struct.error, UnicodeDecodeError):
            return None
        if pos != end:
            return None
        return Columns(partition, self.environment, offsets, ids, senders, types, payloads,
                       stamps, counts)

    def _name(self, raw: bytes) -> str:
        names = self._names
        if len(names) > 4096:
            names.clear()
        name = names[raw] = raw.decode()
        return name

    def _damaged(self, offset: int, why: str) -> None:
        self.damaged += 1
        log.error("replay of txlog/%d: entry at offset %d skipped (%s); it stays queued",
                  self.partition, offset, why)

    def envelope(self, value: bytes, offset: int) -> Envelope:
        """The replayed message in ``value``, QueueEntry bytes (raises CodecError if it is
        not a QueueEntry)."""
        read = self._read
        if read is not None and value[:10] == self._header:
            try:
                f = read(value)
            except (IndexError, UnicodeDecodeError, ValueError):
                f = None
            if f is not None:
                return Envelope(f[1], f[2], f[3], f[4], f[5], True, self.environment, f[8],
                                True, f[6], offset)
        rec = self._records.decode(value).record
        return Envelope(rec["message_id"], rec["sender"], rec["message_type"], rec["payload"],
                        rec["timestamp_ms"], True, self.environment,
                        rec.get("delivery_count", 0), True,
                        rec.get("txlog_partition", self.partition), offset)
