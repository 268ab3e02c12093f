"""Cluster config epochs, push-pull gossip, the universal stable cut, the GC point and
missing-data decisions (the pure parts are in ``stable_cut``, ``gc_point``, ``missing``)."""

from gossip.cluster_config import ConfigLog, Epoch, Partition, append_epoch, fold, validate
from gossip.exceptions import EpochError, GossipError
from gossip.gc_point import clamp_pin, cluster_gc_point, local_gc_cut
from gossip.missing import find_source, intersect, unrecoverable
from gossip.stable_cut import HoldTracker, ReplicaView, cut_holders, stable_cut, stable_cut_ms

__all__ = ["ConfigLog", "Epoch", "Partition", "append_epoch", "fold", "validate",
           "EpochError", "GossipError", "clamp_pin", "cluster_gc_point", "local_gc_cut",
           "find_source", "intersect", "unrecoverable", "HoldTracker", "ReplicaView",
           "cut_holders", "stable_cut", "stable_cut_ms"]
