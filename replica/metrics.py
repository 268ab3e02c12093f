"""Prometheus metrics of a replica node (its own registry, served on a configured address)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

__all__ = ["NodeMetrics"]


class NodeMetrics:
    """The metrics one node exports."""

    def __init__(self, node_id: str) -> None:
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["node"]
        self.node_id = node_id
        self.applied = Counter("tidemark_replica_applied_records", "records applied",
                               labels, registry=r).labels(node_id)
        self.deadletters = Counter("tidemark_replica_deadletter_records",
                                   "records sent to deadletter", labels, registry=r).labels(node_id)
        self.refused = Counter("tidemark_replica_refused_records",
                               "txlog records refused (kind: environment, signature)",
                               labels + ["kind"], registry=r)
        self.backfilled = Counter("tidemark_replica_backfilled_records",
                                  "records copied from peers", labels, registry=r).labels(node_id)
        self.backfill_skipped = Counter(
            "tidemark_replica_backfill_skipped_offsets",
            "gap offsets claimed without copying: the peer's digest equalled the node's own",
            labels, registry=r).labels(node_id)
        self.released = Counter("tidemark_replica_released_records", "records released by GC",
                                labels, registry=r).labels(node_id)
        self.lost = Counter("tidemark_replica_lost_offsets",
                            "offsets spliced as lost (missing data)", labels + ["tp"], registry=r)
        self.ust = Gauge("tidemark_replica_ust_offset", "universal stable cut", labels + ["tp"],
                         registry=r)
        self.gc_point = Gauge("tidemark_replica_gc_point", "cluster GC point", labels + ["tp"],
                              registry=r)
        self.lag = Gauge("tidemark_replica_lag", "log end minus the node's base end",
                         labels + ["tp"], registry=r)
        self.held_back = Gauge("tidemark_replica_held_back_seconds",
                               "how long the cut has been held back", labels + ["by"], registry=r)
        self.epoch = Gauge("tidemark_replica_epoch", "cluster config epoch", labels,
                           registry=r).labels(node_id)
        self.port = 0

    def refused_records(self, kind: str, n: int) -> None:
        """Count ``n`` records refused for ``kind`` (ingest's ``on_refused``)."""
        self.refused.labels(self.node_id, kind).inc(n)

    def serve(self, port: int = 0, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host`` (port 0 = any free one); returns the port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        self.port = server.server_address[1]
        return self.port
