"""Fast structural reader for txlog values (Send, Ack, Purge) on the ingest hot path.

The store keeps a txlog value's raw bytes, so ingest only needs the record type (the
8-byte fingerprint after the ``C3 01`` marker), and for an Ack its ``message_id`` and
``peer``, for a Purge its ``peer``. A scanner walks the Avro body without building Python
objects: every length prefix, that the strings are valid UTF-8, that the trailing
long/int varints are well formed and that nothing follows them. Whatever it cannot vouch
for returns ``None`` and the caller falls back to the full codec decode, which names the
problem (dead letter) or accepts the record (e.g. an older writer schema).
"""

from __future__ import annotations

from collections.abc import Callable

import schemas
from log.codec import MARKER, Codec

__all__ = ["SEND", "ACK", "PURGE", "txlog_scanners", "scan_send", "scan_ack", "scan_purge"]

SEND, ACK, PURGE = 0, 1, 2
_HIGH = bytes(range(0x80, 0x100))  # varint continuation bytes (deleted to count terminators)
Scanner = Callable[[bytes], "bytes | None"]


def _varint(v: bytes, p: int) -> tuple[int, int]:
    """Zigzag varint at ``p``: ``(value, next position)``; IndexError when truncated."""
    acc, shift = 0, 0
    while True:
        b = v[p]
        p += 1
        acc |= (b & 0x7F) << shift
        if b < 0x80:
            return (acc >> 1) ^ -(acc & 1), p
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _strings(v: bytes, p: int, n: int) -> tuple[int, list[tuple[int, int]]] | None:
    """Walk ``n`` Avro strings from ``p``: ``(end, [(start, stop), ...])`` or None when a
    length is negative, the body is truncated or a string is not valid UTF-8."""
    spans = []
    ascii_seps = True
    for _ in range(n):
        b = v[p] if p < len(v) else -1
        if 0 <= b < 0x80 and not b & 1:
            start, p = p + 1, p + 1 + (b >> 1)
        else:
            try:
                size, start = _varint(v, p)
            except (IndexError, ValueError):
                return None
            if size < 0:
                return None
            ascii_seps = False
            p = start + size
        spans.append((start, p))
    if p > len(v):
        return None
    region = v[spans[0][0]:p] if spans else b""
    if not region.isascii():
        try:
            if ascii_seps:  # single-byte lengths are ASCII: the region decodes iff each does
                region.decode()
            else:
                for a, b2 in spans:
                    v[a:b2].decode()
        except UnicodeDecodeError:
            return None
    return p, spans


def _tail_ok(v: bytes, p: int, varints: int) -> bool:
    """Whether ``v[p:]`` is exactly ``varints`` complete varints (long/int fields)."""
    rest = v[p:]
    return (0 < len(rest) <= 10 * varints and rest[-1] < 0x80
            and len(rest.translate(None, _HIGH)) == varints)


def _send_slow(v: bytes) -> bytes | None:
    walked = _strings(v, 10, 5)
    if walked is None:
        return None
    try:
        size, p = _varint(v, walked[0])  # payload: bytes
    except (IndexError, ValueError):
        return None
    return b"" if size >= 0 and _tail_ok(v, p + size, 2) else None


def scan_send(v: bytes) -> bytes | None:
    """A well-formed Send gives ``b""`` (nothing to index); else None."""
    try:  # unrolled for the common case: five strings shorter than 64 bytes
        b = v[10]
        p, o = 11 + (b >> 1), b
        b = v[p]
        p, o = p + 1 + (b >> 1), o | b
        b = v[p]
        p, o = p + 1 + (b >> 1), o | b
        b = v[p]
        p, o = p + 1 + (b >> 1), o | b
        b = v[p]
        p, o = p + 1 + (b >> 1), o | b
        if o & 0x81:  # a long or negative length
            return _send_slow(v)
        if not v[11:p].isascii():
            v[11:p].decode()
        b = v[p]  # payload length: one or two varint bytes
        if b < 0x80:
            n, p = b, p + 1
        else:
            b2 = v[p + 1]
            if b2 >= 0x80:
                return _send_slow(v)
            n, p = (b & 0x7F) | (b2 << 7), p + 2
        if n & 1:
            return None
        rest = v[p + (n >> 1):]
    except (IndexError, UnicodeDecodeError):
        return None
    return b"" if (0 < len(rest) <= 20 and rest[-1] < 0x80
                   and len(rest.translate(None, _HIGH)) == 2) else None


def scan_ack(v: bytes) -> bytes | None:
    """A well-formed Ack gives the index suffix ``peer\\0message_id``; else None."""
    try:
        b = v[10]
        m = 11 + (b >> 1)
        b2 = v[m]
        p = m + 1 + (b2 >> 1)
        b3 = v[p]
        e = p + 1 + (b3 >> 1)
        if (b | b2 | b3) & 0x81:
            return _ack_slow(v)
        if not v[11:e].isascii():
            v[11:e].decode()
        rest = v[e:]
    except (IndexError, UnicodeDecodeError):
        return None
    if 0 < len(rest) <= 10 and rest[-1] < 0x80 and len(rest.translate(None, _HIGH)) == 1:
        return v[m + 1:p] + b"\0" + v[11:m]
    return None


def _ack_slow(v: bytes) -> bytes | None:
    walked = _strings(v, 10, 3)  # message_id, peer, environment
    if walked is None or not _tail_ok(v, walked[0], 1):  # timestamp_ms
        return None
    (ma, mb), (pa, pb) = walked[1][0], walked[1][1]
    return v[pa:pb] + b"\0" + v[ma:mb]


def scan_purge(v: bytes) -> bytes | None:
    """A well-formed Purge gives its ``peer``; else None."""
    walked = _strings(v, 10, 2)  # peer, environment
    if walked is None or not _tail_ok(v, walked[0], 1):  # timestamp_ms
        return None
    a, b = walked[1][0]
    return v[a:b]


# The field layouts the scanners assume; a schema that differs is left to the full decode.
_LAYOUTS = {
    "Send": [("message_id", "string"), ("sender", "string"), ("recipient", "string"),
             ("environment", "string"), ("message_type", "string"), ("payload", "bytes"),
             ("timestamp_ms", "long"), ("delivery_count", "int")],
    "Ack": [("message_id", "string"), ("peer", "string"), ("environment", "string"),
            ("timestamp_ms", "long")],
    "Purge": [("peer", "string"), ("environment", "string"), ("timestamp_ms", "long")],
}


def txlog_scanners(codec: Codec) -> dict[bytes, tuple[int, Scanner]]:
    """``{10-byte header: (kind, scanner)}`` for the current Send, Ack and Purge schemas
    whose field layout is the one the scanners walk."""
    out: dict[bytes, tuple[int, Scanner]] = {}
    for name, kind, scan in (("Send", SEND, scan_send), ("Ack", ACK, scan_ack),
                             ("Purge", PURGE, scan_purge)):
        fields = [(f["name"], f["type"]) for f in schemas.load_schema(name)["fields"]]
        if fields == _LAYOUTS[name]:
            out[MARKER + codec.fingerprint_of(name)] = (kind, scan)
    return out
