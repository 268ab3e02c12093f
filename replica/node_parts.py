"""What the :class:`tidemark.replica.node.Node` mixins share: the node's attributes, declared once
(``node_config.NodeConfigSteps``, ``node_repair.NodeRepair`` and ``node_rpc.NodeRpc`` read
and set them)."""

from __future__ import annotations

import threading

from tidemark.gossip.cluster_config import ConfigLog, Epoch
from tidemark.gossip.node_state import NodeState
from tidemark.log.settings import Settings
from tidemark.replica.config import ClusterFile
from tidemark.replica.ingest import Ingestor
from tidemark.replica.store import Store

__all__ = ["NodeParts"]


class NodeParts:
    """Attribute declarations only; :class:`tidemark.replica.node.Node` assigns them."""

    node_id: str
    cf: ClusterFile
    settings: Settings
    lock: threading.RLock
    states: dict[str, NodeState]
    last_seen: dict[str, float]
    epoch: Epoch
    store: Store
    config: ConfigLog
    ingest: Ingestor
