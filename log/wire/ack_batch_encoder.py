"""The AckBatch a peer appends per batch of handled persistent messages, encoded without the
generic codec.

Only the ids, ``timestamp_ms`` and the range (``span``: the txlog partition and the first
and last offset of a range ack, :mod:`tidemark.peer_client.acks`) change between a peer's
batches: the header, ``peer`` and
``environment`` are encoded once. The result is fastavro's bytes: this is checked once at
construction, which raises ``RuntimeError`` if it ever differs (the schema evolved and this
encoder did not). With a ``seal`` (:mod:`tidemark.log.wire.signed`: the peer's signing step)
each batch is encoded with empty ``signer`` and ``signature`` and then sealed: one signature
per batch, never per id.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidemark.log.exceptions import CodecError, UnknownSchemaError
from tidemark.log.wire.ack_batch_scanner import Span
from tidemark.log.wire.codec import MARKER, Codec
from tidemark.log.wire.signed import Sealer
from tidemark.log.wire.varints import LENGTHS, length_bytes, varint, zigzag_long

__all__ = ["AckBatchEncoder"]

#: ids and timestamps that take :meth:`AckBatchEncoder.encode_fast` through each branch
_PROBES: tuple[tuple[list[str], int, Span | None], ...] = (
    (["probe-\u00e9" * 9, "m-1", ""], 1 << 41, None), (["x" * 9000], -1, (3, 0, 1 << 40)),
    ([], 0, (0, 7, 7)))
_NO_SPAN = zigzag_long(-1) * 3  # txlog_partition, first_offset, last_offset: -1 (no range)


class AckBatchEncoder:
    """``encode(message_ids, now_ms, span=None)``: this peer's encoded AckBatch of
    ``message_ids`` (a range ack when ``span`` is ``(txlog partition, first, last)``)."""

    def __init__(self, codec: Codec, peer_id: str, environment: str,
                 seal: Sealer | None = None) -> None:
        self._codec, self.peer_id, self.environment = codec, peer_id, environment
        self._seal = seal
        self.encode = self.encode_with_codec
        try:
            self._head = MARKER + codec.fingerprint_of("AckBatch") + b"".join(
                length_bytes(len(raw)) + raw for raw in (peer_id.encode("utf-8"),
                                                         environment.encode("utf-8")))
        except (UnknownSchemaError, UnicodeEncodeError):
            return  # no AckBatch schema, or a name the codec cannot encode: it says so later
        self._check()
        self.encode = self.encode_fast if seal is None else self.encode_sealed

    def _check(self) -> None:
        """Raise ``RuntimeError`` unless :meth:`encode_fast` writes what fastavro writes on
        probes that reach each of its branches (the schema changed and this encoder did not)."""
        for ids, ts, span in _PROBES:
            record = {"peer": self.peer_id, "environment": self.environment,
                      "message_ids": ids, "timestamp_ms": ts, **_span_fields(span),
                      "signer": b"", "signature": b""}
            try:
                same = self.encode_fast(ids, ts, span) == self._codec.encode_with_fastavro(
                    "AckBatch", record)
                if same and self._seal is not None:  # the sealed record is fastavro's too
                    sealed = self._seal(self.encode_fast(ids, ts, span))
                    got = self._codec.decode(sealed).record
                    same = sealed == self._codec.encode_with_fastavro("AckBatch", got)
            except (TypeError, ValueError, KeyError, CodecError):
                same = False
            if not same:
                raise RuntimeError("AckBatchEncoder does not write what fastavro writes for the"
                                   " AckBatch schema: update it with the schema")

    def encode_fast(self, message_ids: Sequence[str], now_ms: int,
                    span: Span | None = None) -> bytes:
        """The AckBatch from the constant parts: one array block, the timestamp, the
        range."""
        try:
            parts = [self._head, varint(len(message_ids) << 1)] if message_ids else [self._head]
            for mid in message_ids:
                raw = mid.encode("utf-8")
                n = len(raw)
                parts.append(LENGTHS[n] if n < 8192 else varint(n << 1))
                parts.append(raw)
            parts.append(b"\0")
            parts.append(zigzag_long(now_ms))
            if span is None:
                parts.append(_NO_SPAN)
            else:
                k, first, last = span
                if not 0 <= k < 1 << 31:
                    raise ValueError(f"txlog partition {k} is not an Avro int")
                parts.append(zigzag_long(k) + zigzag_long(first) + zigzag_long(last))
            parts.append(b"\0\0")  # signer and signature: empty (unsigned)
            return b"".join(parts)
        except (UnicodeEncodeError, ValueError):
            return self._unsigned_with_codec(message_ids, now_ms, span)

    def encode_sealed(self, message_ids: Sequence[str], now_ms: int,
                      span: Span | None = None) -> bytes:
        """:meth:`encode_fast`, then signed by the peer's ``seal`` (one signature per batch)."""
        assert self._seal is not None
        return self._seal(self.encode_fast(message_ids, now_ms, span))

    def encode_with_codec(self, message_ids: Sequence[str], now_ms: int,
                          span: Span | None = None) -> bytes:
        """The AckBatch through the codec (the reference), sealed if the encoder seals."""
        value = self._unsigned_with_codec(message_ids, now_ms, span)
        return value if self._seal is None else self._seal(value)

    def _unsigned_with_codec(self, message_ids: Sequence[str], now_ms: int,
                             span: Span | None = None) -> bytes:
        return self._codec.encode("AckBatch", {
            "peer": self.peer_id, "environment": self.environment,
            "message_ids": list(message_ids), "timestamp_ms": now_ms, **_span_fields(span),
            "signer": b"", "signature": b""})


def _span_fields(span: Span | None) -> dict[str, int]:
    """The range fields of an AckBatch record (-1 each without a range)."""
    k, first, last = span if span is not None else (-1, -1, -1)
    return {"txlog_partition": k, "first_offset": first, "last_offset": last}
