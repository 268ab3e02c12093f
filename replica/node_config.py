"""A replica node's config steps: rejoin with a new store, promotion of a joining replica,
following the ``config`` topic (re-assignment, removal)."""

from __future__ import annotations

import logging
import threading
import time

from tidemark.gossip.cluster_config import append_epoch
from tidemark.log.offsets import end_offsets
from tidemark.replica.exceptions import ReplicaError
from tidemark.replica.ingest import TOPICS
from tidemark.replica.membership import PromotionInput, promoted_epoch, promotion_step, rejoin_epoch
from tidemark.replica.node_parts import NodeParts

__all__ = ["NodeConfigSteps"]

log = logging.getLogger("replica.node")


class NodeConfigSteps(NodeParts):
    """Mixin of :class:`tidemark.replica.node.Node`: its config-change steps."""

    ust: dict[str, int]
    period: float
    promoting_since: float | None
    removed: bool
    stopping: threading.Event

    def _rejoin_if_new_store(self, attempts: int = 5) -> None:
        """A new store stays new (``Store.created``) until the epoch moving this node to
        ``joining`` is committed: a failed read or append leaves it new for the next start."""
        for _ in range(attempts):
            part = self.epoch.partition_of(self.node_id)
            has_data = bool(self.store.created and part is not None and any(
                end_offsets(self.settings, "txlog", part.log_partitions).values()))
            successor = rejoin_epoch(self.epoch, self.node_id, self.store.created, has_data)
            if successor is None:  # nothing to rejoin, or the rejoin is already committed
                if self.store.created:
                    self.store.mark_complete()
                return
            log.warning("store of %s is new: rejoining as a joining replica", self.node_id)
            append_epoch(self.settings, successor)
            self.epoch = self.config.read_to_end() or self.epoch  # a competing change may win
        raise ReplicaError(f"{self.node_id}: the rejoin epoch was not committed after "
                           f"{attempts} attempts (competing config changes); the store stays "
                           f"new and the next start retries")

    def _consider_promotion(self) -> None:
        part = self.epoch.partition_of(self.node_id)
        if part is None or self.node_id not in part.joining:
            return
        now = time.monotonic()
        with self.lock:
            fresh = {n: self.states[n] for n in part.replicas if n in self.states
                     and now - self.last_seen.get(n, -1e9) < self.cf.down_after_ms / 1000}
            inp = PromotionInput(
                self.node_id, self.epoch, fresh, dict(self.states), dict(self.ust),
                {f"{t}/{k}": self.store.map(t, k) for k in part.log_partitions for t in TOPICS},
                frozenset(self.ingest.high), self.promoting_since, now, self.period)
        action = promotion_step(inp)
        if action == "announce":
            self.promoting_since = now  # counted toward the cut from now on
            log.warning("%s caught up; announcing it before promotion", self.node_id)
        elif action == "withdraw":
            self.promoting_since = None
        elif action == "promote":
            log.warning("caught up: promoting %s to a counting replica of %s", self.node_id,
                        part.name)
            append_epoch(self.settings, promoted_epoch(self.epoch, self.node_id))
            self._follow_config()

    def _follow_config(self) -> None:
        new = self.config.poll()
        if new is None or new is self.epoch:
            return
        log.warning("config epoch %d -> %d (%s)", self.epoch.epoch, new.epoch, new.reason)
        with self.lock:
            self.epoch = new
            for gone in set(self.states) - set(new.nodes):
                self.states.pop(gone, None)
                self.last_seen.pop(gone, None)
        part = new.partition_of(self.node_id)
        if part is None:
            log.warning("node %s was removed from the config in epoch %d; stopping",
                        self.node_id, new.epoch)
            self.removed = True
            self.stopping.set()
        elif sorted(part.log_partitions) != self.ingest.partitions:
            self.ingest.assign(part.log_partitions)
