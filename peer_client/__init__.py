"""The library peers use: typed handlers, send and publish, the directory, direct delivery,
acks, durability levels, flight size, and an in-memory test double
(``tidemark.peer_client.testing``).

Every error the library raises is a :class:`PeerClientError`; the specific ones are in
:mod:`tidemark.peer_client.exceptions`. ``BatchFailed`` and ``MessageFailed`` are what a batch
handler raises; ``Nak`` and ``Term`` (or ``ctx.nak()`` / ``ctx.term()``) control a message's
next delivery.
"""

from tidemark.log.settings import Settings, load_settings
from tidemark.peer_client.aio import AsyncPeer
from tidemark.peer_client.context import BatchContext, MessageContext, Phase
from tidemark.peer_client.delivery import Delivery
from tidemark.peer_client.exceptions import BatchFailed, MessageFailed, Nak, PeerClientError, Term
from tidemark.peer_client.messages import MessageType, message, message_type_of, register_message
from tidemark.peer_client.metrics import PeerCollector
from tidemark.peer_client.options import ALL, LOG, QUORUM, PeerOptions
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.protocol import PeerLike, SyncPeer
from tidemark.peer_client.replay import ReplayFailedError, ReplicaReplayer
from tidemark.peer_client.serializers import AvroSerializer, JsonSerializer, Serializer

__all__ = [
    "Peer", "AsyncPeer", "PeerLike", "SyncPeer", "ReplicaReplayer", "Settings", "load_settings",
    "MessageContext", "BatchContext", "Phase",
    "MessageType", "message", "message_type_of", "register_message",
    "PeerOptions", "LOG", "QUORUM", "ALL", "Delivery", "AvroSerializer", "JsonSerializer",
    "Serializer", "PeerCollector",
    "PeerClientError", "BatchFailed", "MessageFailed", "Nak", "Term", "ReplayFailedError",
]
