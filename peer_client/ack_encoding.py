"""The AckBatch a peer appends per batch of handled persistent messages, encoded without the
generic codec.

Only the ids and ``timestamp_ms`` change between a peer's batches: the header, ``peer`` and
``environment`` are encoded once. The result is the codec's bytes; this is checked once at
construction (and the codec is used if it ever differs, e.g. after the schema evolved).
:func:`chunks` cuts a long run of ids into batches that stay far below Kafka's record limit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tidemark.log.codec import MARKER, Codec
from tidemark.log.fast_encoder import varint, zigzag_long

__all__ = ["AckBatchEncoder", "chunks", "MAX_BATCH_BYTES"]

#: An AckBatch's ids stay below about this many characters (4 bytes each at most in
#: UTF-8: below Kafka's default 1 MiB record limit).
MAX_BATCH_BYTES = 128 * 1024
_LEN = [bytes((n << 1,)) for n in range(64)]  # Avro lengths below 64: one byte
_PROBE = (["probe-\u00e9" * 9, "m-1", ""], 1 << 41)


def chunks(ids: Sequence[str], max_ids: int,
           max_bytes: int = MAX_BATCH_BYTES) -> Iterator[Sequence[str]]:
    """``ids`` in order, cut into runs of at most ``max_ids`` ids and about ``max_bytes``."""
    start, size = 0, 0
    for i, mid in enumerate(ids):
        n = len(mid) + 2
        if i > start and (i - start >= max_ids or size + n > max_bytes):
            yield ids[start:i]
            start, size = i, 0
        size += n
    if start < len(ids):
        yield ids[start:]


class AckBatchEncoder:
    """``encode(message_ids, now_ms)``: this peer's encoded AckBatch of ``message_ids``."""

    def __init__(self, codec: Codec, peer_id: str, environment: str) -> None:
        self._codec, self.peer_id, self.environment = codec, peer_id, environment
        self.encode = self.encode_with_codec
        try:
            self._head = MARKER + codec.fingerprint_of("AckBatch") + b"".join(
                varint(len(raw) << 1) + raw for raw in (peer_id.encode("utf-8"),
                                                        environment.encode("utf-8")))
            if self.encode_fast(*_PROBE) == self.encode_with_codec(*_PROBE):
                self.encode = self.encode_fast
        except Exception:  # noqa: BLE001 - ids the codec cannot encode: it says so later
            pass

    def encode_fast(self, message_ids: Sequence[str], now_ms: int) -> bytes:
        """The AckBatch from the constant parts: one array block, then the timestamp."""
        try:
            parts = [self._head, varint(len(message_ids) << 1)] if message_ids else [self._head]
            for mid in message_ids:
                raw = mid.encode("utf-8")
                n = len(raw)
                parts.append(_LEN[n] if n < 64 else varint(n << 1))
                parts.append(raw)
            parts.append(b"\0")
            parts.append(zigzag_long(now_ms))
            return b"".join(parts)
        except (UnicodeEncodeError, ValueError):
            return self.encode_with_codec(message_ids, now_ms)

    def encode_with_codec(self, message_ids: Sequence[str], now_ms: int) -> bytes:
        """The AckBatch through the codec (the reference)."""
        return self._codec.encode("AckBatch", {
            "peer": self.peer_id, "environment": self.environment,
            "message_ids": list(message_ids), "timestamp_ms": now_ms})
