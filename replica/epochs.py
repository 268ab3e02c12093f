"""A replica node's config epochs: rejoining with a new store, following the ``config`` topic
(re-assignment, removal) and promoting itself once a joining replica caught up. The
decisions are :mod:`tidemark.replica.membership`'s; this applies them."""

from __future__ import annotations

import logging
import threading
import time

from tidemark.gossip.cluster_config import ConfigLog, Epoch, append_epoch
from tidemark.log.offsets import end_offsets
from tidemark.log.settings import Settings
from tidemark.replica.cut import CutKeeper
from tidemark.replica.exceptions import ReplicaError
from tidemark.replica.ingest import TOPICS, Ingestor
from tidemark.replica.membership import PromotionInput, promoted_epoch, promotion_step, rejoin_epoch
from tidemark.replica.store import Store
from tidemark.replica.view import ClusterView

__all__ = ["rejoin_if_new_store", "EpochFollower"]

log = logging.getLogger("replica.node")


def rejoin_if_new_store(settings: Settings, config: ConfigLog, store: Store, node_id: str,
                        epoch: Epoch, attempts: int = 5) -> Epoch:
    """The epoch to start in, after moving ``node_id`` to ``joining`` if its store is new.
    A new store stays new (``Store.created``) until the epoch moving this node to
    ``joining`` is committed: a failed read or append leaves it new for the next start."""
    for _ in range(attempts):
        part = epoch.partition_of(node_id)
        has_data = bool(store.created and part is not None and any(
            end_offsets(settings, "txlog", part.log_partitions).values()))
        successor = rejoin_epoch(epoch, node_id, store.created, has_data)
        if successor is None:  # nothing to rejoin, or the rejoin is already committed
            if store.created:
                store.mark_complete()
            return epoch
        log.warning("store of %s is new: rejoining as a joining replica", node_id)
        append_epoch(settings, successor)
        epoch = config.read_to_end() or epoch  # a competing change may win
    raise ReplicaError(f"{node_id}: the rejoin epoch was not committed after "
                       f"{attempts} attempts (competing config changes); the store stays "
                       f"new and the next start retries")


class EpochFollower:
    """Follows the ``config`` topic into ``view`` and promotes a joining node."""

    def __init__(self, settings: Settings, config: ConfigLog, view: ClusterView, cut: CutKeeper,
                 store: Store, ingest: Ingestor, period: float,
                 stopping: threading.Event) -> None:
        self.settings, self.config, self.view, self.cut = settings, config, view, cut
        self.store, self.ingest, self.period, self.stopping = store, ingest, period, stopping
        #: when this joining node announced ``caught_up`` (None: not announced)
        self.promoting_since: float | None = None

    def follow(self) -> None:
        """Apply a new epoch if one arrived: re-assign partitions, or stop once removed."""
        view = self.view
        new = self.config.poll()
        if new is None or new is view.epoch:
            return
        log.warning("config epoch %d -> %d (%s)", view.epoch.epoch, new.epoch, new.reason)
        view.adopt(new)
        part = new.partition_of(view.node_id)
        if part is None:
            log.warning("node %s was removed from the config in epoch %d; stopping",
                        view.node_id, new.epoch)
            self.stopping.set()
        elif sorted(part.log_partitions) != self.ingest.partitions:
            self.ingest.assign(part.log_partitions)

    def consider_promotion(self) -> None:
        """One step of a joining node's promotion (:func:`membership.promotion_step`)."""
        view, node_id = self.view, self.view.node_id
        part = view.epoch.partition_of(node_id)
        if part is None or node_id not in part.joining:
            return
        now = time.monotonic()
        with view.lock:
            fresh = view.fresh(now)
            inp = PromotionInput(
                node_id, view.epoch,
                {n: view.states[n] for n in part.replicas if n in view.states and n in fresh},
                dict(view.states), dict(self.cut.ust),
                {f"{t}/{k}": self.store.map(t, k) for k in part.log_partitions for t in TOPICS},
                frozenset(self.ingest.high), self.promoting_since, now, self.period)
        action = promotion_step(inp)
        if action == "announce":
            self.promoting_since = now  # counted toward the cut from now on
            log.warning("%s caught up; announcing it before promotion", node_id)
        elif action == "withdraw":
            self.promoting_since = None
        elif action == "promote":
            log.warning("caught up: promoting %s to a counting replica of %s", node_id,
                        part.name)
            append_epoch(self.settings, promoted_epoch(view.epoch, node_id))
            self.follow()
