"""Cluster config epochs, interval maps, the gossiped node state, the replica service
(client and server) and who may call it (cluster secret, peer tokens), the universal stable
cut, the GC point and missing-data decisions (the pure parts are in ``interval_map``,
``stable_cut``, ``gc_point``, ``missing``, ``peer_auth``)."""

from gossip.cluster_config import ConfigLog, Epoch, Partition, append_epoch, fold, validate
from gossip.durability import wait_replicated
from gossip.exceptions import EpochError, GossipError, NodeUnreachableError
from gossip.gc_point import clamp_pin, cluster_gc_point, local_gc_cut
from gossip.interval_map import IntervalMap, record_hash
from gossip.missing import find_source, intersect, unrecoverable
from gossip.node_state import NodeState, PartitionRanges, cut_entries, cut_from_entries
from gossip.peer_auth import PeerClaims, authorize_peer, issue_token, verify_token
from gossip.service import (
    ReplicaClient,
    fetch_status,
    gossip_round,
    pack_records,
    start_server,
    unpack_records,
)
from gossip.stable_cut import HoldTracker, ReplicaView, cut_holders, stable_cut, stable_cut_ms

__all__ = ["ConfigLog", "Epoch", "Partition", "append_epoch", "fold", "validate",
           "EpochError", "GossipError", "clamp_pin", "cluster_gc_point", "local_gc_cut",
           "find_source", "intersect", "unrecoverable", "HoldTracker", "ReplicaView",
           "cut_holders", "stable_cut", "stable_cut_ms", "NodeUnreachableError", "IntervalMap",
           "record_hash", "NodeState", "PartitionRanges", "cut_entries", "cut_from_entries",
           "ReplicaClient", "fetch_status", "gossip_round", "pack_records", "start_server",
           "unpack_records", "PeerClaims", "authorize_peer", "issue_token", "verify_token",
           "wait_replicated"]
