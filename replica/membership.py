"""Membership transitions a node makes itself: rejoining with a new store, and promotion
of a joining replica once it has caught up (the next-config transition)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from gossip.cluster_config import Partition, append_epoch
from gossip.exchange import state_view
from log.offsets import end_offsets
from replica.ingest import TOPICS

if TYPE_CHECKING:
    from replica.node import Node

__all__ = ["rejoin_if_new_store", "maybe_promote"]

log = logging.getLogger("replica.node")


def rejoin_if_new_store(node: "Node") -> None:
    """A counting replica whose store is new (wiped, replaced) lacks what the cut may
    already cover: it moves itself to ``joining`` and counts again once caught up."""
    part = node.epoch.partition_of(node.node_id)
    if not node.store.created or node.node_id not in part.replicas or len(part.replicas) < 2:
        return
    if not any(end_offsets(node.settings, "txlog", part.log_partitions).values()):
        return  # nothing written yet: nothing to lack
    parts = tuple(Partition(p.name, p.log_partitions,
                            tuple(r for r in p.replicas if r != node.node_id),
                            p.joining + (node.node_id,)) if p is part else p
                  for p in node.epoch.partitions)
    log.warning("store of %s is new: rejoining %s as a joining replica", node.node_id,
                part.name)
    append_epoch(node.settings, node.epoch.successor(
        partitions=parts, reason=f"{node.node_id} store is new: rejoining"))
    node.epoch = node.config.read_to_end() or node.epoch


def maybe_promote(node: "Node") -> None:
    """Promote a joining node once it holds everything the counting replicas hold: no gaps,
    consuming, and at or past every counting replica's gossiped base end and cut.
    It first announces ``caught_up`` (from then on every node counts it toward the cut) and
    promotes itself three gossip periods later if it still qualifies, so the cut cannot
    have risen past what it holds in between."""
    part = node.epoch.partition_of(node.node_id)
    if node.node_id not in part.joining:
        return
    now = time.monotonic()
    with node.lock:
        views = {n: state_view(node.states[n]) for n in part.replicas if n in node.states
                 and now - node.last_seen.get(n, -1e9) < node.cf.down_after_ms / 1000}
        cuts = [{f"{e['topic']}/{e['partition']}": e["offset"] for e in s.get("ust", [])}
                for s in node.states.values()]
    if set(views) != set(part.replicas):
        return
    for k in part.log_partitions:
        for topic in TOPICS:
            m, tp = node.store.map(topic, k), f"{topic}/{k}"
            need = max([node.ust.get(tp, 0)] + [c.get(tp, 0) for c in cuts]
                       + [v.base.get(tp, (0, 1 << 62))[1] for v in views.values()])
            if m.detached or tp not in node.ingest.high or m.base_end < need:
                if node.promoting_since is None:
                    return
                if m.detached:  # a new gap: withdraw (it keeps the cut down meanwhile)
                    node.promoting_since = None
                return
    if node.promoting_since is None:
        node.promoting_since = now  # announce caught_up; counted toward the cut from now on
        log.warning("%s caught up; announcing it before promotion", node.node_id)
        return
    if now - node.promoting_since < 3 * node.period:
        return  # let every counting replica take the announcement into its cut first
    parts = tuple(Partition(p.name, p.log_partitions, p.replicas + (node.node_id,),
                            tuple(j for j in p.joining if j != node.node_id))
                  if p is part else p for p in node.epoch.partitions)
    log.warning("caught up: promoting %s to a counting replica of %s", node.node_id, part.name)
    append_epoch(node.settings, node.epoch.successor(
        partitions=parts, reason=f"{node.node_id} caught up"))
    node._follow_config()
