"""A replica node's gap repair: backfill from peers, and splicing ranges that no replica and
no longer Kafka holds (missing data) into the map and the loss ledger."""

from __future__ import annotations

import json
import logging
import time

from tidemark.gossip.cluster_config import ConfigLog
from tidemark.gossip.missing import unrecoverable, without_losses
from tidemark.log import clock
from tidemark.replica.backfill import Backfiller
from tidemark.replica.ingest import Ingestor
from tidemark.replica.metrics import NodeMetrics
from tidemark.replica.store import Store
from tidemark.replica.view import ClusterView

__all__ = ["Repairer"]

log = logging.getLogger("replica.node")


class Repairer:
    """Repairs the txlog gaps of the node ``view`` is of, a bounded amount per :meth:`step`."""

    def __init__(self, view: ClusterView, store: Store, config: ConfigLog, ingest: Ingestor,
                 backfiller: Backfiller, metrics: NodeMetrics) -> None:
        self.view, self.store, self.config, self.ingest = view, store, config, ingest
        self.backfiller, self.metrics = backfiller, metrics

    def step(self) -> None:
        """Backfill gaps from peers; splice ranges that nobody can have (missing data)."""
        view, node_id = self.view, self.view.node_id
        part = view.partition()
        with view.lock:
            maps = {n: s.maps() for n, s in view.states.items()}
            losses = {n: s.loss_entries() for n, s in view.states.items() if n != node_id}
            fresh = view.fresh(time.monotonic())
        addresses = {n: a for n, a in view.epoch.nodes.items() if n != node_id and n in fresh}
        for k in part.log_partitions:
            tp = f"txlog/{k}"
            if not self.store.map("txlog", k).detached:
                continue
            # what each peer really holds: not the ranges it spliced as lost
            peer_maps = {n: without_losses(m[tp], [(e["start"], e["end"]) for e in losses[n]
                                                   if e.get("partition") == k
                                                   and e.get("topic") == "txlog"])
                         for n, m in maps.items() if tp in m and n != node_id}
            try:
                self.backfiller.step(k, peer_maps, addresses,
                                     on_copied=self.metrics.backfilled.inc,
                                     on_skipped=self.metrics.backfill_skipped.inc)
            except Exception as exc:  # a peer went away mid-copy: retry next tick
                log.warning("backfill of %s paused: %s", tp, exc)
            holders = view.epoch.holders()[tp]
            if any(h not in fresh for h in holders):
                continue
            mine = {node_id: maps[node_id][tp]} if tp in maps.get(node_id, {}) else {}
            lost = unrecoverable(holders, {**peer_maps, **mine}, self.ingest.low.get(tp, 0))
            if lost:
                self._splice(k, lost)

    def _splice(self, k: int, lost: list[tuple[int, int]]) -> None:
        epoch = self.config.read_to_end()  # strongly consistent: no newer config may hold it
        if epoch is not self.view.epoch:
            return
        node_id = self.view.node_id
        batch = self.store.batch()
        key = self.store.next_loss_key()
        for i, (a, b) in enumerate(lost):
            batch.map("txlog", k).splice(a, b)
            entry = {"topic": "txlog", "partition": k, "start": a, "end": b,
                     "epoch": epoch.epoch, "node": node_id,
                     "detected_ms": clock.now_ms()}
            batch.put(key[:1] + (int.from_bytes(key[1:], "big") + i).to_bytes(8, "big"),
                      json.dumps(entry).encode())
            self.metrics.lost.labels(node_id, f"txlog/{k}").inc(b - a)
            log.error("DATA LOST: txlog/%d [%d, %d) is held by no replica and is gone from "
                      "Kafka; spliced into the interval map and recorded in the loss ledger",
                      k, a, b)
        batch.commit()
