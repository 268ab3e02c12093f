"""The peer client's records: the codec over every schema, and record builders.

The codec knows the shared schemas plus the peer client's own (``DeliveryFailed`` in txlog,
``DirectBatch``/``DirectReceipt`` on the direct gRPC path) and accepts records written with
the previous versions of ``Send`` and ``PeerDescriptor`` (``schemas/history``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import schemas
from log.codec import Codec, default_codec

__all__ = ["PEER_SCHEMAS", "peer_codec", "mark_direct", "Envelope", "encode_varint"]

#: Schemas of the peer client not (yet) in ``schemas.SCHEMA_NAMES``.
PEER_SCHEMAS = ("DeliveryFailed", "DirectBatch", "DirectReceipt")
_HISTORY = (("Send", "Send.v1"), ("PeerDescriptor", "PeerDescriptor.v1"))

_CODEC: Codec | None = None


def peer_codec() -> Codec:
    """One process-wide codec with every schema the peer client reads or writes."""
    global _CODEC
    if _CODEC is None:
        base = schemas.load_all()
        if all(name in base for name in PEER_SCHEMAS):
            codec = default_codec()
        else:
            extra = {name: schemas.load_schema(name) for name in PEER_SCHEMAS
                     if name not in base}
            codec = Codec({**base, **extra})
        for name, old in _HISTORY:
            path = schemas.SCHEMA_DIR / "history" / f"{old}.avsc"
            if path.exists():
                try:
                    codec.register_writer(name, json.loads(path.read_text()))
                except Exception:  # noqa: BLE001 - an identical schema is already known
                    pass
        _CODEC = codec
    return _CODEC


def encode_varint(n: int) -> bytes:
    """Avro zigzag varint of a non-negative length."""
    n <<= 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def mark_direct(send_value: bytes, incarnation: str) -> bytes:
    """An encoded Send (written with ``direct_incarnation`` null) re-marked as delivered
    directly to ``incarnation``. The field is the schema's last one, so its null branch is
    the value's last byte."""
    if not send_value or send_value[-1] != 0:
        raise ValueError("Send value does not end with a null direct_incarnation")
    raw = incarnation.encode("utf-8")
    return b"".join((send_value[:-1], b"\x02", encode_varint(len(raw)), raw))


@dataclass(slots=True)
class Envelope:
    """One message arriving at a peer, directly or (later) by replay."""

    message_id: str
    sender: str
    message_type: str
    payload: bytes
    timestamp_ms: int
    persistent: bool
    environment: str
    delivery_count: int = 0
    replay: bool = False
    txlog_partition: int = -1
    txlog_offset: int = -1

    @classmethod
    def from_send(cls, rec: Mapping[str, Any], replay: bool = True, partition: int = -1,
                  offset: int = -1) -> "Envelope":
        """From a Send (or QueueEntry-like) record read from the log."""
        return cls(rec["message_id"], rec["sender"], rec["message_type"], rec["payload"],
                   rec["timestamp_ms"], True, rec.get("environment", ""),
                   rec.get("delivery_count", 0), replay, partition, offset)
