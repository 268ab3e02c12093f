"""Replay rows: a queue entry in the form a replay streams it.

A replica node builds the row when it applies a QueueEntry from ``queues`` (ingest has the
record decoded then) and keeps it in its queue index, so a replay streams rows as stored
and the peer reads each with one ``struct`` call and four slices, with no Avro parsed per
message (reading a QueueEntry cost the peer 1.6 µs a message, a row 0.5 µs).

Layout: :data:`ROW_TAG` (``\\0R``), then ``>qqiiHHHI`` (timestamp ms, txlog offset, txlog
partition, delivery count, then the byte lengths of message id, sender, message type and
payload), then those four fields (UTF-8 for the strings). An entry stored before rows
existed is QueueEntry bytes (Avro single-object, first byte ``0xC3``): :func:`entry_record`
reads both. A peer says it reads rows (``"rows": true`` in its replay request); to a peer
that does not (a client from before rows), the replica streams QueueEntry bytes
(:func:`queue_entry`), so replicas can be upgraded before their peers.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from tidemark.log.wire.codec import default_codec

__all__ = ["ROW_TAG", "ROW_HEAD", "HEAD_SIZE", "Row", "encode_row", "decode_row", "is_row",
           "entry_record", "queue_entry", "RowError"]

#: The first two bytes of a row (a QueueEntry's first byte is the Avro marker 0xC3).
ROW_TAG = b"\0R"
ROW_HEAD = struct.Struct(">qqiiHHHI")
HEAD_SIZE = len(ROW_TAG) + ROW_HEAD.size
_MAX_SHORT = 0xFFFF


class RowError(ValueError):
    """Bytes that are not a well-formed row."""


class Row(NamedTuple):
    """The fields of one replayed entry."""

    message_id: str
    sender: str
    message_type: str
    payload: bytes
    timestamp_ms: int
    txlog_offset: int
    txlog_partition: int
    delivery_count: int


def encode_row(rec: Mapping[str, Any]) -> bytes | None:
    """The row of a QueueEntry record; None if a field does not fit the layout (an id,
    sender or type over 64 KiB: such an entry stays QueueEntry bytes)."""
    mid = str(rec["message_id"]).encode("utf-8")
    sender = str(rec["sender"]).encode("utf-8")
    mtype = str(rec["message_type"]).encode("utf-8")
    payload = bytes(rec["payload"])
    if max(len(mid), len(sender), len(mtype)) > _MAX_SHORT:
        return None
    try:
        head = ROW_HEAD.pack(int(rec["timestamp_ms"]), int(rec["txlog_offset"]),
                          int(rec["txlog_partition"]), int(rec.get("delivery_count", 0)),
                          len(mid), len(sender), len(mtype), len(payload))
    except struct.error:
        return None
    return b"".join((ROW_TAG, head, mid, sender, mtype, payload))


def is_row(value: bytes) -> bool:
    """Whether ``value`` is a row (else it is QueueEntry bytes)."""
    return value[:2] == ROW_TAG


def decode_row(value: bytes) -> Row:
    """The fields of a row; :class:`RowError` if it is damaged."""
    if value[:2] != ROW_TAG or len(value) < HEAD_SIZE:
        raise RowError("not a replay row")
    ts, off, part, count, a, b, c, d = ROW_HEAD.unpack_from(value, 2)
    p = HEAD_SIZE
    if p + a + b + c + d != len(value):
        raise RowError(f"replay row of {len(value)} bytes, its fields say {p + a + b + c + d}")
    try:
        mid = value[p:p + a].decode("utf-8")
        p += a
        sender = value[p:p + b].decode("utf-8")
        p += b
        mtype = value[p:p + c].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RowError(f"replay row with a malformed string: {exc}") from None
    return Row(mid, sender, mtype, value[p + c:], ts, off, part, count)


def entry_record(value: bytes) -> dict[str, Any]:
    """The QueueEntry fields (``peer`` aside) of a replayed entry, row or QueueEntry bytes
    (raises :class:`RowError` or the codec's ``CodecError``)."""
    if is_row(value):
        return decode_row(value)._asdict()
    rec = dict(default_codec().decode(value).record)
    rec.pop("peer", None)
    return rec


def queue_entry(value: bytes, peer: str) -> bytes:
    """QueueEntry bytes of a replayed entry of ``peer``'s queue: a row re-encoded, QueueEntry
    bytes as they are (raises :class:`RowError` for a damaged row)."""
    if not is_row(value):
        return value
    return default_codec().encode("QueueEntry", {"peer": peer, **decode_row(value)._asdict()})
