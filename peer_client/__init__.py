"""The library peers use: send/publish, handlers, acks, directory, replay.

Not built yet: no issue covers it so far. The pieces it will stand on exist in ``log``
(the durable producer, the codec, the partitioner) and in ``schemas`` (Send, Ack, Purge,
PeerDescriptor).
"""

from peer_client.exceptions import PeerClientError, WrongEnvironmentError

__all__ = ["PeerClientError", "WrongEnvironmentError"]
