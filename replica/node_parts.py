"""What the :class:`replica.node.Node` mixins share: the node's attributes, declared once
(``node_config.NodeConfigSteps``, ``node_repair.NodeRepair`` and ``node_rpc.NodeRpc`` read
and set them)."""

from __future__ import annotations

import threading

from gossip.cluster_config import ConfigLog, Epoch
from gossip.node_state import NodeState
from log.settings import Settings
from replica.config import ClusterFile
from replica.ingest import Ingestor
from replica.store import Store

__all__ = ["NodeParts"]


class NodeParts:
    """Attribute declarations only; :class:`replica.node.Node` assigns them."""

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
