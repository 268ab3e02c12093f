"""The peer client's records: the codec over every schema, and record builders.

The shared codec knows the peer client's schemas (``DeliveryFailed`` in txlog,
``DirectBatch``/``DirectReceipt`` on the direct gRPC path) and accepts records written with
the previous versions of ``Send`` and ``PeerDescriptor`` (``schemas/history``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidemark.log.codec import Codec, default_codec
from tidemark.peer_client.avro_fast import length_bytes

__all__ = ["PEER_SCHEMAS", "peer_codec", "mark_direct", "Envelope"]

#: The peer client's own schemas (all registered in the shared codec).
PEER_SCHEMAS = ("DeliveryFailed", "DirectBatch", "DirectReceipt")


def peer_codec() -> Codec:
    """The process-wide codec: every schema, and the earlier versions of evolved ones."""
    return default_codec()


def mark_direct(send_value: bytes, incarnation: str) -> bytes:
    """An encoded Send (written with ``direct_incarnation`` null) re-marked as delivered
    directly to ``incarnation``. The field is the schema's last one, so its null branch is
    the value's last byte."""
    if not send_value or send_value[-1] != 0:
        raise ValueError("Send value does not end with a null direct_incarnation")
    raw = incarnation.encode("utf-8")
    return b"".join((send_value[:-1], b"\x02", length_bytes(len(raw)), raw))


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
