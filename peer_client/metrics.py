"""Prometheus metrics of a peer, read from :meth:`Peer.status` at scrape time (nothing is
counted twice: the peer's own counters are the source).

``PeerCollector(peer.status)`` can be registered in any ``prometheus_client`` registry;
``PeerOptions(metrics_bind="127.0.0.1:9108")`` makes the peer serve ``/metrics`` itself
(port 0: any free port, see ``Peer.metrics_endpoint``), with the process and Python GC
metrics (``process_resident_memory_bytes``, ``process_cpu_seconds_total``, ``python_gc_*``)
beside the peer's. Exported:

* ``tidemark_peer_info{peer,environment,incarnation,endpoint}`` = 1
* ``tidemark_peer_phase{peer,tidemark_peer_phase}`` (a state set: its state is the label of
  the metric's own name): 1 for the current phase (created, starting, replay,
  handover, normal, stopping, stopped), 0 for the others
* ``tidemark_peer_<counter>_total{peer}`` for each of the peer's counters: every one in
  :data:`COUNTER_HELP` from the first scrape (0 until counted), each with its own help;
  a counter not in the table is exported with a generic help once the peer reports it
* ``tidemark_peer_dedup_store_ids{peer}`` (a gauge) when the peer has a dedup store
* the held-back list: ``tidemark_peer_held_*`` gauges, ``tidemark_peer_held_refused_total``
  and ``tidemark_peer_held_superseded_total``
* with replay on: ``tidemark_peer_replayed_total``, ``tidemark_peer_forwarded_total``,
  ``tidemark_peer_replay_duplicates_dropped_total``, ``tidemark_peer_replay_retries_total``,
  ``tidemark_peer_replay_seconds``, ``tidemark_peer_handover_seconds``,
  ``tidemark_peer_replay_barrier`` (txlog offset of the last replay's barrier)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    StateSetMetricFamily,
)

from tidemark.log.runtime_metrics import runtime_registry
from tidemark.peer_client.context import Phase

__all__ = ["PeerCollector", "MetricsServer", "PHASES", "COUNTER_HELP", "GAUGE_HELP"]

#: Every phase the ``tidemark_peer_phase`` state set shows.
PHASES = tuple(p.value for p in Phase)

#: The peer's counters (``status()["stats"]`` keys) and their help texts; each is exported
#: as ``tidemark_peer_<key>_total`` from the first scrape, at 0 until the peer counts one.
COUNTER_HELP: dict[str, str] = {
    # sending
    "sent": "point-to-point messages accepted for sending (send, send_nowait, post)",
    "published": "publish calls (one per call, whatever the number of subscribers)",
    "logged": "Send records this peer appended to txlog",
    "direct_delivered": "messages delivered directly, confirmed by the recipient's receipt",
    "direct_failed": "messages whose direct delivery failed or was refused (they take txlog)",
    # receiving
    "received": "messages taken from accepted direct batches",
    "handled": "messages whose handler returned",
    "handler_failed": "messages whose handler raised (not acked, reported)",
    "naks": "messages whose handler nak'ed them (reported, delivered again here after a delay)",
    "terminated": "messages whose handler terminated them (a terminal DeliveryFailed: the"
                  " queues dead-letter them at once)",
    "failed_deliveries": "messages reported as failed (handler raised, no handler, malformed);"
                         " a persistent one gets a DeliveryFailed record",
    "unknown_type": "messages of a type not declared in this process (not acked, reported)",
    "no_handler": "messages of a declared type without a handler here (not acked, reported)",
    "malformed": "messages whose payload did not decode (not acked, reported)",
    "duplicates": "messages dropped as duplicates (seen in the dedup window or already held)",
    "replayed_lean": "replayed messages taken in bulk, a chunk as columns (the lean path; the"
                     " others went one message at a time)",
    "completed_before": "messages completed by an earlier incarnation: acked, not run again",
    "abandoned": "queued messages dropped unhandled and unacked when the peer gave up its"
                 " work (the next incarnation gets them again)",
    "held_back": "live messages put on the held-back list during replay, as they came",
    "refused_held_full": "direct messages refused during replay because the held-back list"
                         " was full (their sender appends them to txlog)",
    "refused_stopping": "messages refused because the peer was stopping",
    "rejected": "direct batches and messages refused for being of another environment",
    "forbidden": "direct batches refused: the caller's certificate may not speak for the"
                 " named sender",
    "stale_direct": "messages of late direct batches refused (a later batch of their sender"
                    " was accepted already)",
    "bad_requests": "direct requests that could not be decoded or answered",
    "waited_for_log": "direct batches whose sender's messages waited for the follower to"
                      " pass the sender's logged ones",
    # acks
    "acks": "message ids acked (appended in AckBatch records)",
    "ack_errors": "ack appends Kafka did not acknowledge (those messages come again)",
    # directory and dedup store
    "directory_rejected": "directory records ignored (under another peer's key or of another"
                          " environment)",
    "superseded": "times another process registered this peer id",
    "dedup_store_errors": "completed ids the dedup store failed to record (the ack still went)",
    "dedup_store_expired": "ids the dedup store expired (older than its TTL or over its"
                           " size bound)",
}

#: ``status()["stats"]`` keys that are levels, not counts: exported as gauges, when present.
GAUGE_HELP: dict[str, str] = {
    "dedup_store_ids": "message ids held in the dedup store now",
}

_GENERIC_HELP = "the peer's '{}' counter"

#: ``status()["replay"]`` counters: key -> (metric name, help)
_REPLAY_COUNTERS = {
    "replayed": ("replayed", "replayed entries dispatched (duplicates not included)"),
    "forwarded": ("forwarded", "txlog Sends the follower delivered during the handover"),
    "duplicates_dropped": ("replay_duplicates_dropped",
                           "replayed entries received from replicas and dropped as"
                           " duplicates"),
    "retries": ("replay_retries", "replays interrupted and retried on another replica")}


#: The latency histograms (``status()["latency"]``, peer_client.latency): metric name, help,
#: and the histograms under it with their extra label value (durability), if any.
LATENCY_HELP: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "send_seconds": ("from a send call until its durability level held (log: Kafka acknowledged"
                     " it; quorum/all: the stable cut passed it); one send in 16 is timed",
                     (("send_log", "log"), ("send_quorum", "quorum"), ("send_all", "all"))),
    "handler_seconds": ("one handler call, its ack queued (a run of messages handled together:"
                        " its share per message); one message in 16 is timed",
                        (("handler", ""),)),
    "replay_seconds_per_message": ("a replay batch from its arrival until the peer admitted all"
                                   " of it (at the handlers' pace), over its length",
                                   (("replay_batch", ""),)),
}


def _latencies(peer: str, doc: Any) -> Iterator[Metric]:
    """The histograms of :data:`LATENCY_HELP`, present (at 0) from the first scrape."""
    doc = doc if isinstance(doc, Mapping) else {}
    for name, (help_text, parts) in LATENCY_HELP.items():
        labeled = any(value for _, value in parts)
        h = HistogramMetricFamily(_name(name), help_text,
                                  labels=["peer", "durability"] if labeled else ["peer"])
        for key, value in parts:
            snap = doc.get(key) or {}
            buckets = [(_bound(b), float(n)) for b, n in snap.get("buckets", [])] or \
                [("+Inf", 0.0)]
            h.add_metric([peer, value] if labeled else [peer], buckets,
                         float(snap.get("sum", 0.0)))
        yield h


def _bound(b: Any) -> str:
    return b if isinstance(b, str) else repr(float(b))


def _name(stat: str) -> str:
    return "tidemark_peer_" + re.sub(r"[^a-zA-Z0-9_]", "_", stat)


class PeerCollector:
    """A ``prometheus_client`` collector over a peer's ``status()`` document."""

    def __init__(self, status: Callable[[], Mapping[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        """The metric families of one scrape."""
        doc = self._status()
        peer = str(doc.get("peer_id", ""))
        info = GaugeMetricFamily("tidemark_peer_info", "this peer's identity (value 1)",
                                 labels=["peer", "environment", "incarnation", "endpoint"])
        info.add_metric([peer, str(doc.get("environment", "")), str(doc.get("incarnation", "")),
                         str(doc.get("endpoint", ""))], 1)
        yield info
        phase = StateSetMetricFamily("tidemark_peer_phase", "where the peer is in its life",
                                     labels=["peer"])
        phase.add_metric([peer], {p: p == doc.get("phase") for p in PHASES})
        yield phase
        yield from _stats(peer, doc.get("stats"))
        yield from _held(peer, doc.get("held"))
        yield from _latencies(peer, doc.get("latency"))
        replay = doc.get("replay")
        if not isinstance(replay, Mapping):
            return
        for key, (name, help_text) in _REPLAY_COUNTERS.items():
            c = CounterMetricFamily(_name(name), help_text, labels=["peer"])
            c.add_metric([peer], int(replay.get(key, 0) or 0))
            yield c
        for key, name, help_text in (
                ("replay_ms", "replay_seconds", "how long the last replay took"),
                ("handover_ms", "handover_seconds", "how long the last handover took")):
            g = GaugeMetricFamily(_name(name), help_text, labels=["peer"])
            g.add_metric([peer], float(replay.get(key, 0) or 0) / 1000)
            yield g
        barrier = replay.get("barrier")
        if isinstance(barrier, int):
            g = GaugeMetricFamily(_name("replay_barrier"),
                                  "txlog offset of the last replay's barrier", labels=["peer"])
            g.add_metric([peer], barrier)
            yield g


def _stats(peer: str, stats: Any) -> Iterator[Metric]:
    """The peer's counters, in name order: every one of :data:`COUNTER_HELP` (0 until
    reported) and any other the peer reports; then its levels (:data:`GAUGE_HELP`)."""
    values = dict(stats) if isinstance(stats, Mapping) else {}
    numbers = {k: v for k, v in values.items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    for stat in sorted(COUNTER_HELP.keys() | (numbers.keys() - GAUGE_HELP.keys())):
        c = CounterMetricFamily(_name(stat), COUNTER_HELP.get(stat) or _GENERIC_HELP.format(stat),
                                labels=["peer"])
        c.add_metric([peer], numbers.get(stat, 0))
        yield c
    for stat, help_text in GAUGE_HELP.items():
        if stat in numbers:
            g = GaugeMetricFamily(_name(stat), help_text, labels=["peer"])
            g.add_metric([peer], numbers[stat])
            yield g


#: ``status()["held"]`` keys exported as gauges: (key, metric name, help)
_HELD_GAUGES = (
    ("messages", "held_messages", "live messages held back while the peer replays"),
    ("bytes", "held_bytes", "payload bytes of the live messages held back"),
    ("peak_messages", "held_peak_messages", "most live messages held back at once"),
    ("peak_bytes", "held_peak_bytes", "most payload bytes held back at once"),
    ("limit_messages", "held_limit_messages", "hold_limit: held-back messages at most"),
    ("limit_bytes", "held_limit_bytes", "hold_bytes: held-back payload bytes at most"))


def _held(peer: str, held: Any) -> Iterator[Metric]:
    """The held-back list's gauges and its refusals counter."""
    if not isinstance(held, Mapping):
        return
    for key, name, help_text in _HELD_GAUGES:
        g = GaugeMetricFamily(_name(name), help_text, labels=["peer"])
        g.add_metric([peer], float(held.get(key, 0) or 0))
        yield g
    for key, help_text in (
            ("refused", "live messages the held-back list refused for being full (they"
                        " arrive through txlog)"),
            ("superseded", "held-back copies dropped because their logged copy went by")):
        c = CounterMetricFamily(_name(f"held_{key}"), help_text, labels=["peer"])
        c.add_metric([peer], int(held.get(key, 0) or 0))
        yield c


class MetricsServer:
    """``/metrics`` of one collector on ``host:port`` (port 0: a free one). Without a
    ``registry``, the one served also holds the process and Python GC metrics; with one
    (the application's own), ``collector`` is registered there and that registry is served
    as it is."""

    def __init__(self, collector: PeerCollector, bind: str,
                 registry: CollectorRegistry | None = None) -> None:
        host, _, port = bind.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"metrics_bind must be HOST:PORT, got {bind!r}")
        self.registry = runtime_registry(auto_describe=False) if registry is None else registry
        self.registry.register(collector)
        self._collector = collector
        self._server, self._thread = start_http_server(int(port), host, self.registry)
        self.endpoint = f"{host}:{self._server.server_port}"

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self.registry.unregister(self._collector)  # the application's registry lives on
