"""What a replica node knows of the cluster: the current config epoch and the newest
NodeState of every node of it, with when each was last heard from, under one lock."""

from __future__ import annotations

import logging
import threading
import time

from tidemark.gossip.cluster_config import Epoch, Partition
from tidemark.gossip.node_state import NodeState
from tidemark.log import clock
from tidemark.replica.exceptions import ReplicaError

__all__ = ["ClusterView"]

log = logging.getLogger("tidemark.replica.node")  # the node's lines keep their logger


#: A gossiped state stamped further ahead of this node's clock is refused: it would shadow the
#: node's real states for good. Keep the nodes' clocks within this of each other (NTP).
MAX_FUTURE_MS = 5_000


class ClusterView:
    """The epoch and the gossiped states. ``lock`` also guards what is computed from them
    (the cut, the node's own encoded state), so a reader sees one consistent picture."""

    def __init__(self, node_id: str, epoch: Epoch, down_after_s: float) -> None:
        self.node_id = node_id
        self.epoch = epoch
        self.down_after_s = down_after_s
        self.lock = threading.RLock()
        self.states: dict[str, NodeState] = {}
        self.last_seen: dict[str, float] = {}

    def partition(self) -> Partition:
        """This node's replica partition in the current epoch (it is in the epoch while it
        runs: removal stops it)."""
        part = self.epoch.partition_of(self.node_id)
        if part is None:
            raise ReplicaError(f"node {self.node_id} is not in epoch {self.epoch.epoch}")
        return part

    def fresh(self, now: float) -> set[str]:
        """The nodes heard from within ``down_after_s`` of ``now`` (call under ``lock``)."""
        return {n for n, t in self.last_seen.items() if now - t < self.down_after_s}

    def set_own(self, state: NodeState) -> None:
        """Record this node's own latest state (call under ``lock``)."""
        self.states[self.node_id] = state
        self.last_seen[self.node_id] = time.monotonic()

    def receive(self, state: NodeState) -> bool:
        """Take another node's state; True if it is newer than the one held."""
        node = state.node_id
        if state.timestamp_ms > clock.now_ms() + MAX_FUTURE_MS:
            log.warning("ignoring a state of %s stamped in the future", node)
            return False  # it would shadow the node's real states for good
        with self.lock:
            if node == self.node_id or node not in self.epoch.nodes:
                return False  # removed nodes are no longer listened to
            old = self.states.get(node)
            newer = old is None or old.timestamp_ms <= state.timestamp_ms
            if newer:
                self.states[node] = state
            self.last_seen[node] = time.monotonic()
        return newer

    def adopt(self, epoch: Epoch) -> None:
        """Move to ``epoch``, forgetting the nodes it no longer names."""
        with self.lock:
            self.epoch = epoch
            for gone in set(self.states) - set(epoch.nodes):
                self.states.pop(gone, None)
                self.last_seen.pop(gone, None)
