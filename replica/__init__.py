"""LevelDB replica nodes: ingest, store, interval maps, GC and release policy, backfill,
gRPC server, metrics, the cluster TOML and the ``tidemark replica`` CLI."""

from replica.config import ClusterFile, ReleasePolicy, load_cluster_file
from replica.exceptions import (ClusterConfigError, NodeUnreachableError, ReplicaError,
                                StoreError)
from replica.interval_map import IntervalMap, record_hash
from replica.store import Store

__all__ = ["ClusterFile", "ReleasePolicy", "load_cluster_file", "ClusterConfigError",
           "NodeUnreachableError", "ReplicaError", "StoreError", "IntervalMap", "record_hash",
           "Store"]
