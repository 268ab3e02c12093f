"""Fast structural reader for AckBatch values (a peer's acks, one record per batch of ids).

An AckBatch holds ``peer``, ``environment``, the array ``message_ids``, ``timestamp_ms`` and,
since range acks, ``txlog_partition``, ``first_offset`` and ``last_offset``. Ingest writes one
Ack index key per id, ``peer\\0message_id`` (or one range key for a range ack); GC visits the
ids in order. Both only need the ids' UTF-8 bytes and the range, so :func:`scan_ack_batch`
walks the Avro body and slices them out, without building the record or a ``str`` per id.
It checks what the codec would: every length and block count, that the strings are valid
UTF-8, that the timestamp varint (and any field appended to the schema with a default) ends
the value exactly. Whatever it cannot vouch for returns ``None``, and the caller falls back
to the full decode, which names the problem (dead letter) or accepts the record.

``tests/property/wire/test_scanners.py`` checks it against the codec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidemark import schemas
from tidemark.log.wire.codec import MARKER, Codec
from tidemark.log.wire.varints import read_long
from tidemark.log.wire.walk import Tail, appended_kind, tail_check, walk_strings

__all__ = ["ACK_BATCH", "AckBatchFields", "Span", "AckBatchScanner", "ack_batch_scanner",
           "ack_batch_header", "scan_ack_batch", "AdmissionScanner", "admission_scanner"]

#: The kind of an AckBatch among :mod:`tidemark.log.wire.scanners`' SEND, ACK and PURGE.
ACK_BATCH = 3
#: ``(ACK_BATCH, peer, [message ids], timestamp_ms, span)``, the strings as UTF-8 bytes;
#: ``span`` is ``(txlog partition, first offset, last offset)`` of a range ack, else None.
AckBatchFields = tuple[int, bytes, list[bytes], int, "Span | None"]
Span = tuple[int, int, int]
AckBatchScanner = Callable[[bytes], "AckBatchFields | None"]
#: ``scan(value) -> (fields, record)`` or None: what :data:`AckBatchScanner` reads, and
#: the fields an admission checks (``peer``, ``environment``, ``timestamp_ms``, ``signer``,
#: ``signature``; :class:`~tidemark.gossip.txlog_admission.TxlogAdmission`).
AdmissionScanner = Callable[[bytes], "tuple[AckBatchFields, dict[str, Any]] | None"]

_BASE = [("peer", "string"), ("environment", "string"),
         ("message_ids", {"type": "array", "items": "string"}), ("timestamp_ms", "long")]
_RANGE = [("txlog_partition", "int"), ("first_offset", "long"), ("last_offset", "long")]


def _ids(v: bytes, p: int) -> tuple[list[bytes], int] | None:
    """The array of strings at ``p``: ``(ids, end)``, or None when it is malformed."""
    ids: list[bytes] = []
    append, size = ids.append, len(v)
    while True:
        count, p = read_long(v, p)
        if count == 0:
            break
        if count < 0:  # a block with its byte size first
            count = -count
            _, p = read_long(v, p)
        for _ in range(count):
            b = v[p]
            if not b & 0x81:  # a length below 64: one byte, even (zigzag of a positive)
                q = p + 1 + (b >> 1)
                append(v[p + 1:q])
                p = q
            else:
                n, p = read_long(v, p)
                if n < 0:
                    return None
                append(v[p:p + n])
                p += n
        if p > size:
            return None
    if p > size:
        return None
    if not b"".join(ids).isascii():  # ASCII is valid UTF-8; else each id must decode
        for raw in ids:
            raw.decode()  # raises UnicodeDecodeError: caught by the caller
    return ids, p


def ack_batch_scanner(fields: list[dict[str, Any]]) -> AckBatchScanner | None:
    """The scanner for an AckBatch schema with ``fields``, or None when its layout is not
    the base layout followed by walkable fields with defaults."""
    if [(f["name"], f["type"]) for f in fields[:len(_BASE)]] != _BASE:
        return None
    at = len(_BASE)
    ranged = [(f["name"], f["type"]) for f in fields[at:at + len(_RANGE)]] == _RANGE
    extras = [appended_kind(f) for f in fields[at + (len(_RANGE) if ranged else 0):]]
    if any(k is None for k in extras):
        return None
    kinds = tuple(k for k in extras if k is not None)
    return _scanner(tail_check(0, kinds) if kinds else _no_extras, ranged)


def _scanner(tail: Tail, ranged: bool = False, view: bool = False) -> Any:
    def scan(v: bytes) -> Any:
        """``(ACK_BATCH, peer, ids, timestamp, span)`` of a well-formed AckBatch; else
        None. With ``view``: that, the environment's ``(start, end)`` and where the fields
        after the range start (:func:`admission_scanner` reads signer and signature there)."""
        walked = walk_strings(v, 10, 2)  # peer, environment
        if walked is None:
            return None
        try:
            got = _ids(v, walked[0])
            if got is None:
                return None
            ids, p = got
            ts, p = read_long(v, p)
            span: Span | None = None
            if ranged:
                k, p = read_long(v, p)
                first, p = read_long(v, p)
                last, p = read_long(v, p)
                if not -(1 << 31) <= k < 1 << 31:
                    return None  # not an Avro int: the codec refuses it
                if k >= 0:
                    span = (k, first, last)
        except (IndexError, UnicodeDecodeError):
            return None
        if p > len(v) or not tail(v, p):
            return None
        a, b = walked[1][0]
        if view:
            return (ACK_BATCH, v[a:b], ids, ts, span), walked[1][1], p
        return ACK_BATCH, v[a:b], ids, ts, span
    return scan


def _no_extras(v: bytes, p: int) -> bool:
    return p == len(v)


#: The scanner of the current AckBatch schema (its signer and signature walked, not checked).
scan_ack_batch: AckBatchScanner = (
    ack_batch_scanner(list(schemas.load_schema("AckBatch")["fields"])) or _scanner(_no_extras))


def ack_batch_header(codec: Codec) -> tuple[bytes, AckBatchScanner] | None:
    """``(10-byte header, scanner)`` of the current AckBatch schema, or None when its
    layout is one the scanner does not walk."""
    scan = ack_batch_scanner(list(schemas.load_schema("AckBatch")["fields"]))
    if scan is None:
        return None
    return MARKER + codec.fingerprint_of("AckBatch"), scan


_SIGNED_TAIL = [("signer", "bytes"), ("signature", "bytes")]


def admission_scanner(fields: list[dict[str, Any]]) -> AdmissionScanner | None:
    """A scanner for a component that checks each AckBatch's environment and signer before
    applying it: :func:`ack_batch_scanner`'s fields, and the record fields the check reads,
    without decoding each id into a ``str`` as the codec does. None unless the schema is the
    ranged layout ending with exactly ``signer`` and ``signature`` (then decode)."""
    at = len(_BASE) + len(_RANGE)
    if ack_batch_scanner(fields) is None or \
            [(f["name"], f["type"]) for f in fields[len(_BASE):at]] != _RANGE or \
            [(f["name"], f["type"]) for f in fields[at:]] != _SIGNED_TAIL:
        return None
    kinds = tuple(k for k in map(appended_kind, fields[at:]) if k is not None)
    if len(kinds) != len(_SIGNED_TAIL):
        return None
    scan = _scanner(tail_check(0, kinds), True, True)

    def admit_scan(v: bytes) -> tuple[AckBatchFields, dict[str, Any]] | None:
        got = scan(v)
        if got is None:
            return None
        found, (ea, eb), p = got
        try:  # the tail check walked these two: well-formed, ending the value
            n, p = read_long(v, p)
            signer = v[p:p + n]
            p += n
            n, p = read_long(v, p)
            signature = v[p:p + n]
            environment = v[ea:eb].decode()
            peer = found[1].decode()
        except (IndexError, UnicodeDecodeError):
            return None
        return found, {"peer": peer, "environment": environment, "timestamp_ms": found[3],
                       "signer": signer, "signature": signature}
    return admit_scan
