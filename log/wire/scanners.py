"""Fast structural reader for txlog values (Send, Ack, Purge) on the ingest hot path.

The store keeps a txlog value's raw bytes, so ingest only needs the record type (the
8-byte fingerprint after the ``C3 01`` marker), and for an Ack its ``message_id`` and
``peer``, for a Purge its ``peer``. A scanner walks the Avro body without building Python
objects: every length prefix, that the strings are valid UTF-8, that the trailing
long/int varints are well formed and that nothing follows them. Whatever it cannot vouch
for returns ``None`` and the caller falls back to the full codec decode, which names the
problem (dead letter) or accepts the record (e.g. an older writer schema).

Fields appended to a schema with defaults (Send's nullable ``direct_incarnation``) are
walked after the base layout; a schema whose layout is anything else gets no scanner.
"""

from __future__ import annotations

from collections.abc import Callable

from tidemark import schemas
from tidemark.log.wire.codec import MARKER, Codec
from tidemark.log.wire.varints import read_long
from tidemark.log.wire.walk import Tail, appended_kind, tail_check, walk_strings

__all__ = ["SEND", "ACK", "PURGE", "Scanner", "txlog_scanners", "scanner_for", "scan_send",
           "scan_ack", "scan_purge", "txlog_readers", "Fields", "read_send", "read_ack",
           "read_purge"]

SEND, ACK, PURGE = 0, 1, 2
Scanner = Callable[[bytes], "bytes | None"]
_BASE_TAIL = tail_check(2, ())  # timestamp_ms, delivery_count


def _send_slow(v: bytes, tail: Tail = _BASE_TAIL) -> bytes | None:
    walked = walk_strings(v, 10, 5)
    if walked is None:
        return None
    try:
        size, p = read_long(v, walked[0])  # payload: bytes
    except IndexError:
        return None
    if size >= 0 and p + size <= len(v) and tail(v, p + size):
        a, b = walked[1][3]
        return v[a:b]
    return None


def _send_scanner(tail: Tail) -> Scanner:
    """The Send scanner for a layout whose fields after ``payload`` ``tail`` checks."""
    def scan_send(v: bytes) -> bytes | None:
        """A well-formed Send gives its ``environment`` (ingest keeps its own environment's
        Sends on this path; a Send indexes nothing); else None."""
        try:  # unrolled for the common case: five strings shorter than 64 bytes
            b = v[10]
            p, o = 11 + (b >> 1), b
            b = v[p]
            p, o = p + 1 + (b >> 1), o | b
            b = v[p]
            p, o = p + 1 + (b >> 1), o | b
            b = v[p]
            e = p + 1  # the environment starts here
            p, o = p + 1 + (b >> 1), o | b
            env_end = p
            b = v[p]
            p, o = p + 1 + (b >> 1), o | b
            if o & 0x81:  # a long or negative length
                return _send_slow(v, tail)
            if not v[11:p].isascii():
                v[11:p].decode()
            b = v[p]  # payload length: one or two varint bytes
            if b < 0x80:
                n, p = b, p + 1
            else:
                b2 = v[p + 1]
                if b2 >= 0x80:
                    return _send_slow(v, tail)
                n, p = (b & 0x7F) | (b2 << 7), p + 2
            if n & 1:
                return None
            p += n >> 1
            if p >= len(v):
                return None
        except IndexError:  # a long string made the unrolled walk overshoot
            return _send_slow(v, tail)
        except UnicodeDecodeError:
            return None
        return v[e:env_end] if tail(v, p) else None
    return scan_send


def _ack_scanner(tail: Tail) -> Scanner:
    """The Ack scanner for a layout whose fields after ``environment`` ``tail`` checks."""
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
                return _ack_slow(v, tail)
            if not v[11:e].isascii():
                v[11:e].decode()
            if e >= len(v):
                return None
        except IndexError:
            return _ack_slow(v, tail)
        except UnicodeDecodeError:
            return None
        if tail(v, e):
            return v[m + 1:p] + b"\0" + v[11:m]
        return None
    return scan_ack


def _ack_slow(v: bytes, tail: Tail) -> bytes | None:
    walked = walk_strings(v, 10, 3)  # message_id, peer, environment
    if walked is None or not tail(v, walked[0]):  # timestamp_ms, appended fields
        return None
    (ma, mb), (pa, pb) = walked[1][0], walked[1][1]
    return v[pa:pb] + b"\0" + v[ma:mb]


def _purge_scanner(tail: Tail) -> Scanner:
    """The Purge scanner for a layout whose fields after ``environment`` ``tail`` checks."""
    def scan_purge(v: bytes) -> bytes | None:
        """A well-formed Purge gives its ``peer``; else None."""
        walked = walk_strings(v, 10, 2)  # peer, environment
        if walked is None or not tail(v, walked[0]):  # timestamp_ms, appended fields
            return None
        a, b = walked[1][0]
        return v[a:b]
    return scan_purge


_ONE_VARINT = tail_check(1, ())
scan_send = _send_scanner(_BASE_TAIL)
scan_ack = _ack_scanner(_ONE_VARINT)
scan_purge = _purge_scanner(_ONE_VARINT)  # the base layout; the current one: scanner_for


# The base field layouts the scanners walk, and how many long/int fields end each; a schema
# may append fields with defaults after them (walked by the tail check), anything else is
# left to the full decode.
_LAYOUTS = {
    "Send": [("message_id", "string"), ("sender", "string"), ("recipient", "string"),
             ("environment", "string"), ("message_type", "string"), ("payload", "bytes"),
             ("timestamp_ms", "long"), ("delivery_count", "int")],
    "Ack": [("message_id", "string"), ("peer", "string"), ("environment", "string"),
            ("timestamp_ms", "long")],
    "Purge": [("peer", "string"), ("environment", "string"), ("timestamp_ms", "long")],
}
_TAIL_VARINTS = {"Send": 2, "Ack": 1, "Purge": 1}
_FACTORIES = {"Send": _send_scanner, "Ack": _ack_scanner, "Purge": _purge_scanner}


def scanner_for(name: str, fields: list[dict]) -> Scanner | None:
    """The scanner for record ``name`` with schema ``fields``, or None when the layout is
    not the base layout followed by walkable fields with defaults."""
    base = _LAYOUTS[name]
    if [(f["name"], f["type"]) for f in fields[:len(base)]] != base:
        return None
    extras = [appended_kind(f) for f in fields[len(base):]]
    if any(k is None for k in extras):
        return None
    tail = tail_check(_TAIL_VARINTS[name], tuple(k for k in extras if k is not None))
    return _FACTORIES[name](tail)


def txlog_scanners(codec: Codec) -> dict[bytes, tuple[int, Scanner]]:
    """``{10-byte header: (kind, scanner)}`` for the current Send, Ack and Purge schemas
    whose field layout is one the scanners walk."""
    out: dict[bytes, tuple[int, Scanner]] = {}
    for name, kind in (("Send", SEND), ("Ack", ACK), ("Purge", PURGE)):
        scan = scanner_for(name, list(schemas.load_schema(name)["fields"]))
        if scan is not None:
            out[MARKER + codec.fingerprint_of(name)] = (kind, scan)
    return out


# ---- field readers for GC ------------------------------------------------------------------
#: ``(kind, peer, message_id, timestamp_ms)``: the recipient of a Send, the peer of an Ack or
#: a Purge (whose message id is ``b""``), as the UTF-8 bytes the index keys are built from.
Fields = tuple[int, bytes, bytes, int]


def _span(v: bytes, p: int) -> tuple[int, int]:
    """``(start, end)`` of the Avro string/bytes at ``p``."""
    b = v[p]
    if b < 0x80 and not b & 1:
        return p + 1, p + 1 + (b >> 1)
    n, start = read_long(v, p)
    if n < 0:
        raise ValueError("negative length")
    return start, start + n


def read_send(v: bytes) -> Fields:
    """Fields of a Send in the current layout (raises on a malformed value)."""
    ma, mb = _span(v, 10)
    _, p = _span(v, mb)      # sender
    ra, rb = _span(v, p)     # recipient
    _, p = _span(v, rb)      # environment
    _, p = _span(v, p)       # message_type
    _, p = _span(v, p)       # payload
    if p > len(v):
        raise IndexError("truncated")
    return SEND, v[ra:rb], v[ma:mb], read_long(v, p)[0]


def read_ack(v: bytes) -> Fields:
    """Fields of an Ack in the current layout (raises on a malformed value)."""
    ma, mb = _span(v, 10)
    pa, pb = _span(v, mb)
    _, p = _span(v, pb)      # environment
    if p > len(v):
        raise IndexError("truncated")
    return ACK, v[pa:pb], v[ma:mb], read_long(v, p)[0]


def read_purge(v: bytes) -> Fields:
    """Fields of a Purge in the current layout (raises on a malformed value)."""
    pa, pb = _span(v, 10)
    _, p = _span(v, pb)      # environment
    if p > len(v):
        raise IndexError("truncated")
    return PURGE, v[pa:pb], b"", read_long(v, p)[0]


def txlog_readers(codec: Codec) -> dict[bytes, Callable[[bytes], Fields]]:
    """``{10-byte header: reader}`` for the current Send, Ack and Purge schemas the
    scanners walk (fields appended after the base layout do not move these). GC reads the
    stored records, which ingest validated, with them; other headers need the codec."""
    out: dict[bytes, Callable[[bytes], Fields]] = {}
    for name, read in (("Send", read_send), ("Ack", read_ack), ("Purge", read_purge)):
        if scanner_for(name, list(schemas.load_schema(name)["fields"])) is not None:
            out[MARKER + codec.fingerprint_of(name)] = read
    return out
