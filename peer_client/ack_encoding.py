"""The Ack a peer appends per handled persistent message, encoded without the generic codec.

Only ``message_id`` and ``timestamp_ms`` change between a peer's acks: the header, ``peer``
and ``environment`` are encoded once, and the timestamp's encoding is reused within one
millisecond. The result is the codec's bytes; this is checked once at construction (and the
codec is used if it ever differs, e.g. after the Ack schema evolved).
"""

from __future__ import annotations

from log.codec import MARKER, Codec
from log.fast_encoder import varint, zigzag_long

__all__ = ["AckEncoder"]

_LEN = [bytes((n << 1,)) for n in range(64)]  # Avro lengths below 64: one byte
_PROBE = ("probe-\u00e9" * 9, 1 << 41)


class AckEncoder:
    """``encode(message_id, now_ms)``: this peer's encoded Ack of ``message_id``."""

    def __init__(self, codec: Codec, peer_id: str, environment: str) -> None:
        self._codec, self.peer_id, self.environment = codec, peer_id, environment
        self._head = MARKER + codec.fingerprint_of("Ack")
        self._ts = (0, zigzag_long(0))  # (ms, its encoding), swapped as one reference
        self.encode = self.encode_with_codec
        try:
            self._middle = b"".join(varint(len(raw) << 1) + raw for raw in (
                peer_id.encode("utf-8"), environment.encode("utf-8")))
            if self.encode_fast(*_PROBE) == self.encode_with_codec(*_PROBE):
                self.encode = self.encode_fast
        except Exception:  # noqa: BLE001 - ids the codec cannot encode: it says so later
            pass

    def encode_fast(self, message_id: str, now_ms: int) -> bytes:
        """The Ack from the constant parts."""
        try:
            raw = message_id.encode("utf-8")
            n = len(raw)
            ts = self._ts
            if ts[0] != now_ms:
                ts = self._ts = (now_ms, zigzag_long(now_ms))
            return b"".join((self._head, _LEN[n] if n < 64 else varint(n << 1), raw,
                             self._middle, ts[1]))
        except (UnicodeEncodeError, ValueError):
            return self.encode_with_codec(message_id, now_ms)

    def encode_with_codec(self, message_id: str, now_ms: int) -> bytes:
        """The Ack through the codec (the reference)."""
        return self._codec.encode("Ack", {"message_id": message_id, "peer": self.peer_id,
                                          "environment": self.environment,
                                          "timestamp_ms": now_ms})
