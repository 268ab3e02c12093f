"""Prometheus metrics of a replica node (its own registry, served on a configured address).

Names follow the Prometheus conventions: counters end in ``_total`` (declared so here,
which is what ``prometheus_client`` exposes), gauges and histograms name their unit
(``_records``, ``_offset``, ``_seconds``). The registry also holds the process and Python GC
metrics (``process_resident_memory_bytes``, ``process_cpu_seconds_total``,
``python_gc_*``, ``python_info``): the node's RSS is read from there.
"""

from __future__ import annotations

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from tidemark.log.runtime_metrics import runtime_registry

__all__ = ["NodeMetrics", "DURATION_BUCKETS"]

#: Buckets (seconds) of the duration histograms: 1 ms to 10 s.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0)


class NodeMetrics:
    """The metrics one node exports."""

    def __init__(self, node_id: str) -> None:
        self.registry = runtime_registry()
        r, labels = self.registry, ["node"]
        self.node_id = node_id
        # ---- counters -----------------------------------------------------------------
        self.applied = Counter(
            "tidemark_replica_applied_records_total",
            "records ingest consumed from txlog and queues and applied to the node's store",
            labels, registry=r).labels(node_id)
        self.deadletters = Counter(
            "tidemark_replica_deadletter_records_total",
            "poison records (undecodable or unexpected) ingest dead-lettered",
            labels, registry=r).labels(node_id)
        self.refused = Counter(
            "tidemark_replica_refused_records_total",
            "txlog records refused by admission and dead-lettered, by kind (environment,"
            " signature)", labels + ["kind"], registry=r)
        self.backfilled = Counter(
            "tidemark_replica_backfilled_records_total",
            "txlog records copied from peers to fill gaps", labels, registry=r).labels(node_id)
        self.backfill_skipped = Counter(
            "tidemark_replica_backfill_skipped_offsets_total",
            "gap offsets claimed without copying: the peer's digest equalled the node's own",
            labels, registry=r).labels(node_id)
        self.released = Counter(
            "tidemark_replica_released_records_total",
            "records GC released from the store (below the cluster GC point)",
            labels, registry=r).labels(node_id)
        self.lost = Counter(
            "tidemark_replica_lost_offsets_total",
            "offsets spliced as lost: no replica nor Kafka still held them",
            labels + ["tp"], registry=r)
        # ---- gauges (set on the periodic tick, see CutKeeper.update_gauges) -----------
        self.ust = Gauge(
            "tidemark_replica_ust_offset",
            "universal stable cut: offset below which every counting replica applied all",
            labels + ["tp"], registry=r)
        self.gc_point = Gauge(
            "tidemark_replica_gc_point_offset",
            "cluster GC point: offset below which records may be released",
            labels + ["tp"], registry=r)
        self.lag = Gauge(
            "tidemark_replica_lag_records",
            "records between the node's stable cut and the highest Kafka log end any node"
            " reported for the partition (0: the cut reached the log end)",
            labels + ["tp"], registry=r)
        self.held_back = Gauge(
            "tidemark_replica_held_back_seconds",
            "how long the node in 'by' (the longest holder) has held the stable cut below the"
            " log end",
            labels + ["by"], registry=r)
        self.epoch = Gauge(
            "tidemark_replica_epoch",
            "cluster config epoch the node follows (a plain number)",
            labels, registry=r).labels(node_id)
        # ---- histograms (one observation per round or batch, never per record) --------
        self.gossip_round = Histogram(
            "tidemark_replica_gossip_round_seconds",
            "duration of one full gossip round: push-pull with every other node",
            labels, registry=r, buckets=DURATION_BUCKETS).labels(node_id)
        self.ingest_batch = Histogram(
            "tidemark_replica_ingest_batch_seconds",
            "duration of applying one consumed ingest batch to the store, commit included",
            labels, registry=r, buckets=DURATION_BUCKETS).labels(node_id)
        self.port = 0

    def refused_records(self, kind: str, n: int) -> None:
        """Count ``n`` records refused for ``kind`` (ingest's ``on_refused``)."""
        self.refused.labels(self.node_id, kind).inc(n)

    def serve(self, port: int = 0, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host`` (port 0 = any free one); returns the port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        self.port = server.server_address[1]
        return self.port
