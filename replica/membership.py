"""Membership transitions a node makes itself, as decisions the node applies: rejoining
with a new store, and promotion of a joining replica once it has caught up (the
next-config transition)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidemark.gossip.cluster_config import Epoch, Partition
from tidemark.gossip.interval_map import IntervalMap
from tidemark.gossip.node_state import NodeState
from tidemark.gossip.stable_cut import stable_cut

__all__ = ["rejoin_epoch", "PromotionInput", "promotion_step", "promoted_epoch",
           "counting_owners", "node_cut"]


def rejoin_epoch(epoch: Epoch, node_id: str, store_created: bool, log_has_data: bool
                 ) -> Epoch | None:
    """The successor epoch that moves ``node_id`` to ``joining`` when its store is new (wiped,
    replaced) while it counts toward the cut, or None. A new store lacks what the cut may
    already cover; it counts again once caught up."""
    part = epoch.partition_of(node_id)
    if (part is None or not store_created or node_id not in part.replicas
            or len(part.replicas) < 2 or not log_has_data):
        return None
    parts = tuple(Partition(p.name, p.log_partitions,
                            tuple(r for r in p.replicas if r != node_id),
                            p.joining + (node_id,)) if p is part else p
                  for p in epoch.partitions)
    return epoch.successor(partitions=parts, reason=f"{node_id} store is new: rejoining")


@dataclass(frozen=True)
class PromotionInput:
    """What a joining node knows when it considers promotion."""

    node_id: str
    epoch: Epoch
    fresh_states: Mapping[str, NodeState]   # counting replicas heard from recently
    all_states: Mapping[str, NodeState]
    own_cut: Mapping[str, int]
    own_maps: Mapping[str, IntervalMap]     # by tp, for every owned (topic, partition)
    consuming: frozenset[str]               # tps the ingestor has seen the log end of
    promoting_since: float | None
    now: float
    period: float


def promotion_step(inp: PromotionInput) -> str | None:
    """``"announce"`` (start counting toward the cut), ``"withdraw"`` (a new gap appeared),
    ``"promote"`` (append the promoting epoch) or None (nothing to do yet).

    A joining node qualifies once it holds everything the counting replicas hold: no gaps,
    consuming, and at or past every counting replica's gossiped base end and cut. It first
    announces ``caught_up`` and promotes itself three gossip periods later if it still
    qualifies, so the cut cannot have risen past what it holds in between.
    """
    part = inp.epoch.partition_of(inp.node_id)
    if part is None or inp.node_id not in part.joining:
        return None
    if set(inp.fresh_states) != set(part.replicas):
        return None
    views = {n: s.view() for n, s in inp.fresh_states.items()}
    cuts = [s.ust for s in inp.all_states.values()]
    for tp, m in inp.own_maps.items():
        need = max([inp.own_cut.get(tp, 0)] + [c.get(tp, 0) for c in cuts]
                   + [v.base.get(tp, (0, 1 << 62))[1] for v in views.values()])
        if m.detached or tp not in inp.consuming or m.base_end < need:
            if inp.promoting_since is not None and m.detached:
                return "withdraw"  # a new gap: it keeps the cut down meanwhile
            return None
    if inp.promoting_since is None:
        return "announce"
    if inp.now - inp.promoting_since < 3 * inp.period:
        return None  # let every counting replica take the announcement into its cut first
    return "promote"


def promoted_epoch(epoch: Epoch, node_id: str) -> Epoch:
    """The successor epoch in which joining ``node_id`` counts."""
    part = epoch.partition_of(node_id)
    parts = tuple(Partition(p.name, p.log_partitions, p.replicas + (node_id,),
                            tuple(j for j in p.joining if j != node_id))
                  if p is part else p for p in epoch.partitions)
    return epoch.successor(partitions=parts, reason=f"{node_id} caught up")


def counting_owners(epoch: Epoch, states: Mapping[str, NodeState]) -> dict[str, list[str]]:
    """``{tp: nodes}`` counting toward the cut: the epoch's replicas, plus joining replicas
    that announced ``caught_up`` (they may only lower the cut)."""
    owners = epoch.owners()
    for p in epoch.partitions:
        for j in p.joining:
            joiner = states.get(j)
            if joiner is not None and joiner.caught_up:
                for k in p.log_partitions:
                    owners[f"txlog/{k}"].append(j)
    return owners


def node_cut(epoch: Epoch, states: Mapping[str, NodeState], previous: Mapping[str, int]
             ) -> dict[str, int]:
    """The stable cut a node computes: from the replicas' own reported maps only (never
    from the cuts other nodes gossip, which a forged or buggy message could raise), never
    below ``previous`` (this node's own last cut)."""
    return stable_cut(counting_owners(epoch, states), {n: s.view() for n, s in states.items()},
                      previous)
