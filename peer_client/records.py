"""The peer client's records: the codec over every schema, and the envelope of a message.

The shared codec knows the peer client's schemas (``DeliveryFailed`` in txlog,
``DirectBatch``/``DirectReceipt`` on the direct gRPC path) and accepts records written with
the previous versions of ``Send`` and ``PeerDescriptor`` (``schemas/history``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidemark.log.wire import Codec, default_codec

__all__ = ["PEER_SCHEMAS", "peer_codec", "Envelope"]

#: The peer client's own schemas (all registered in the shared codec).
PEER_SCHEMAS = ("DeliveryFailed", "DirectBatch", "DirectReceipt")


def peer_codec() -> Codec:
    """The process-wide codec: every schema, and the earlier versions of evolved ones."""
    return default_codec()


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
