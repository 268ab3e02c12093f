"""Replay on restart, the peer side: a new incarnation replays its queue from a replica,
then hands over to live traffic by following its txlog partition.

- :mod:`~tidemark.peer_client.replay.replayer`: :class:`ReplicaReplayer`, the ``replayer``
  a :class:`~tidemark.peer_client.Peer` runs at start (replay, handover, normal);
- :mod:`~tidemark.peer_client.replay.entries`: replayed entries to envelopes;
- :mod:`~tidemark.peer_client.replay.tail`: what txlog says past a covered replay's barrier
  (pure);
- :mod:`~tidemark.peer_client.replay.follower`: the txlog follower of the handover and after.

The live messages held back meanwhile are the inbox's (:mod:`tidemark.peer_client.held`).
"""

from tidemark.peer_client.replay.entries import EntryReader
from tidemark.peer_client.replay.follower import TxlogFollower
from tidemark.peer_client.replay.replayer import ReplayFailedError, ReplicaReplayer

__all__ = ["ReplicaReplayer", "TxlogFollower", "ReplayFailedError", "EntryReader"]
