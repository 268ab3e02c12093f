"""Prometheus metrics of a peer, read from :meth:`Peer.status` at scrape time (nothing is
counted twice: the peer's own counters are the source).

``PeerCollector(peer.status)`` can be registered in any ``prometheus_client`` registry;
``PeerOptions(metrics_bind="127.0.0.1:9108")`` makes the peer serve ``/metrics`` itself
(port 0: any free port, see ``Peer.metrics_endpoint``). Exported:

* ``tidemark_peer_info{peer,environment,incarnation,endpoint}`` = 1
* ``tidemark_peer_phase{peer,phase}``: 1 for the current phase (created, starting, replay,
  handover, normal, stopping, stopped), 0 for the others
* ``tidemark_peer_<counter>_total{peer}`` for each of the peer's counters (sent, received,
  handled, duplicates, acks, failed_deliveries, held_back, ...)
* with replay on: ``tidemark_peer_replayed_total``, ``tidemark_peer_forwarded_total``,
  ``tidemark_peer_replay_duplicates_dropped_total``, ``tidemark_peer_replay_retries_total``,
  ``tidemark_peer_replay_seconds``, ``tidemark_peer_handover_seconds``,
  ``tidemark_peer_replay_barrier`` (txlog offset of the last replay's barrier)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    StateSetMetricFamily,
)

from tidemark.peer_client.context import Phase

__all__ = ["PeerCollector", "MetricsServer", "PHASES"]

#: Every phase the ``tidemark_peer_phase`` state set shows.
PHASES = tuple(p.value for p in Phase)
_REPLAY_COUNTERS = {"replayed": "replayed", "forwarded": "forwarded",
                    "duplicates_dropped": "replay_duplicates_dropped",
                    "retries": "replay_retries"}


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
        for stat, value in sorted(dict(doc.get("stats", {})).items()):
            if isinstance(value, int | float) and not isinstance(value, bool):
                c = CounterMetricFamily(_name(stat), f"the peer's '{stat}' counter",
                                        labels=["peer"])
                c.add_metric([peer], value)
                yield c
        yield from _held(peer, doc.get("held"))
        replay = doc.get("replay")
        if not isinstance(replay, Mapping):
            return
        for key, name in _REPLAY_COUNTERS.items():
            c = CounterMetricFamily(_name(name), f"replay: {key.replace('_', ' ')}",
                                    labels=["peer"])
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
    c = CounterMetricFamily(_name("held_refused"), "live messages refused because the"
                            " held-back list was full (they arrive through txlog)",
                            labels=["peer"])
    c.add_metric([peer], int(held.get("refused", 0) or 0))
    yield c


class MetricsServer:
    """``/metrics`` of one collector on ``host:port`` (port 0: a free one)."""

    def __init__(self, collector: PeerCollector, bind: str) -> None:
        host, _, port = bind.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"metrics_bind must be HOST:PORT, got {bind!r}")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._server, self._thread = start_http_server(int(port), host, self.registry)
        self.endpoint = f"{host}:{self._server.server_port}"

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
