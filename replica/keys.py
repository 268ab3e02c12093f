"""The store's key layout (one LevelDB folder per node; offsets 8-byte big-endian).

``tp`` = topic code ``t``/``q`` + 2-byte partition.
``D t k off`` txlog record; ``A k peer\\0msg`` ack offset; ``U k peer\\0 off`` purge;
``Q k key`` queue entry (by Kafka key); ``R k`` queue progress; ``M tp`` interval map;
``P tp`` position and last-applied time; ``L seq`` loss ledger; ``X...`` metadata;
``I k peer\\0 off`` queue index (txlog order of a peer's queue, value: the queue key);
``Y pin`` GC pin lease (JSON); ``Z tp off`` dead-letter ledger (poison records whose
dead-letter copy Kafka refused); ``H k range`` digest of the txlog records of one backfill
range (:mod:`tidemark.replica.digests`). ``G k`` GC cursor, ``W k ...`` pending Sends, ``E k ...``
Ack index expiries: owned by :mod:`tidemark.replica.release_policy`.
"""

from __future__ import annotations

import struct

__all__ = ["TOPIC_CODES", "tp_name", "tp_code", "topic_of", "map_key", "position_key",
           "data_key", "data_prefix", "ack_key", "ack_prefix", "purge_prefix", "queue_prefix",
           "progress_key", "deadletter_key", "queue_index_prefix", "queue_index_key",
           "PIN_PREFIX", "pin_key", "CUT_KEY", "NEW_KEY", "POSITION"]

TOPIC_CODES = {"txlog": b"t", "queues": b"q"}
_CODE_TOPICS = {v: k for k, v in TOPIC_CODES.items()}
_H = struct.Struct(">H")
_Q = struct.Struct(">Q")
_HQ = struct.Struct(">HQ")
#: A position value: next offset to consume, last-applied time (ms).
POSITION = struct.Struct(">qq")


def tp_name(topic: str, partition: int) -> str:
    """The status name of a (topic, partition): ``txlog/3``."""
    return f"{topic}/{partition}"


def tp_code(topic: str, partition: int) -> bytes:
    """``tp``: the topic code and the 2-byte partition."""
    return TOPIC_CODES[topic] + _H.pack(partition)


def data_key(partition: int, offset: int) -> bytes:
    """Key of txlog record ``offset`` of ``partition``."""
    return b"Dt" + _HQ.pack(partition, offset)


def data_prefix(partition: int) -> bytes:
    """Prefix of every txlog record key of ``partition`` (followed by the 8-byte offset)."""
    return b"Dt" + _H.pack(partition)


def ack_prefix(partition: int) -> bytes:
    """Prefix of the Ack index of ``partition`` (followed by ``peer\\0message_id``)."""
    return b"A" + _H.pack(partition)


def ack_key(partition: int, peer: str, message_id: str) -> bytes:
    """Ack index key of (peer, message_id); the value is the Ack's 8-byte offset."""
    return ack_prefix(partition) + f"{peer}\0{message_id}".encode()


def purge_prefix(partition: int) -> bytes:
    """Prefix of the Purge index of ``partition`` (followed by ``peer\\0`` and the offset)."""
    return b"U" + _H.pack(partition)


def queue_prefix(partition: int) -> bytes:
    """Prefix of queue entries of queues partition ``partition`` (followed by the Kafka key)."""
    return b"Q" + _H.pack(partition)


def progress_key(partition: int) -> bytes:
    """Key of the last QueueProgress of queues partition ``partition``."""
    return b"R" + _H.pack(partition)


def queue_index_prefix(partition: int, peer: str | None = None) -> bytes:
    """Prefix of the queue index of queues partition ``partition`` (of one peer if given);
    index keys continue with ``peer\\0`` and the entry's 8-byte txlog offset."""
    prefix = b"I" + _H.pack(partition)
    return prefix if peer is None else prefix + peer.encode() + b"\0"


def queue_index_key(partition: int, peer: str, offset: int) -> bytes:
    """Queue index key of ``peer``'s entry at txlog ``offset``; the value is the queue key."""
    return queue_index_prefix(partition, peer) + _Q.pack(offset)


#: Prefix of the GC pin leases (``Y`` + pin id; the value is the lease as JSON).
PIN_PREFIX = b"Y"


def pin_key(pin_id: str) -> bytes:
    """Key of GC pin lease ``pin_id``."""
    return PIN_PREFIX + pin_id.encode()


def deadletter_key(topic: str, partition: int, offset: int) -> bytes:
    """Key of the dead-letter ledger entry of record ``offset`` of (topic, partition)."""
    return b"Z" + tp_code(topic, partition) + _Q.pack(offset)



def topic_of(raw: bytes) -> tuple[str, int]:
    """``(topic, partition)`` of a ``tp`` code."""
    return _CODE_TOPICS[raw[:1]], _H.unpack(raw[1:3])[0]


def map_key(topic: str, partition: int) -> bytes:
    """Key of the interval map of (topic, partition)."""
    return b"M" + tp_code(topic, partition)


def position_key(topic: str, partition: int) -> bytes:
    """Key of the position (and last-applied time) of (topic, partition)."""
    return b"P" + tp_code(topic, partition)


#: The node's last cut and GC point (JSON).
CUT_KEY = b"Xcut"
#: Present while a new store's rejoin is not committed.
NEW_KEY = b"Xnew"
