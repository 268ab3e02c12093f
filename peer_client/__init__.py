"""The library peers use: typed handlers, send and publish, the directory, direct delivery,
acks, durability levels, flight size, and an in-memory test double (``peer_client.testing``).
"""

from log.settings import Settings, load_settings
from peer_client.aio import AsyncPeer
from peer_client.context import BatchContext, MessageContext, Phase
from peer_client.exceptions import (
                                    BatchFailed,
                                    DedupStoreError,
                                    DuplicatePeerError,
                                    DurabilityTimeoutError,
                                    DurabilityUnavailableError,
                                    FlightSizeExceededError,
                                    HandlerError,
                                    MessageFailed,
                                    MessageTypeError,
                                    OversizedMessageError,
                                    PayloadError,
                                    PeerClientError,
                                    PeerStateError,
                                    PeerUnreachableError,
                                    ReplayDeniedError,
                                    UnknownPeerError,
                                    WrongEnvironmentError,
)
from peer_client.messages import MessageType, message, message_type_of, register_message
from peer_client.metrics import PeerCollector
from peer_client.options import ALL, LOG, QUORUM, PeerOptions
from peer_client.peer import Peer
from peer_client.ports import Delivery
from peer_client.replay import ReplayFailedError, ReplicaReplayer
from peer_client.serializers import AvroSerializer, JsonSerializer, Serializer

__all__ = [
    "Peer", "AsyncPeer", "ReplicaReplayer", "Settings", "load_settings", "MessageContext",
    "BatchContext", "Phase",
    "MessageType", "message", "message_type_of", "register_message",
    "PeerOptions", "LOG", "QUORUM", "ALL", "Delivery", "AvroSerializer", "JsonSerializer",
    "Serializer", "PeerCollector",
    "PeerClientError", "WrongEnvironmentError", "DuplicatePeerError", "UnknownPeerError",
    "PeerUnreachableError", "FlightSizeExceededError", "DurabilityTimeoutError",
    "DurabilityUnavailableError", "MessageTypeError", "PayloadError", "PeerStateError",
    "HandlerError", "OversizedMessageError", "ReplayDeniedError", "DedupStoreError",
    "BatchFailed", "MessageFailed", "ReplayFailedError",
]
