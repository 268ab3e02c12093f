"""LevelDB replica nodes: ingest, store, GC and release policy, backfill, metrics, the
cluster TOML, and :class:`Node`, which runs them (serving ``gossip.service``)."""

from tidemark.replica.config import ClusterFile, ReleasePolicy, load_cluster_file
from tidemark.replica.exceptions import (
           ClusterConfigError,
           NodeUnreachableError,
           ReplicaError,
           StoreError,
)
from tidemark.replica.node import Node, genesis_epoch
from tidemark.replica.store import Store, StoreOptions

__all__ = ["ClusterFile", "ReleasePolicy", "load_cluster_file", "ClusterConfigError",
           "NodeUnreachableError", "ReplicaError", "StoreError", "Store", "StoreOptions", "Node",
           "genesis_epoch"]
