"""Peer metrics: the collector over a status document, served over real HTTP."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tidemark.peer_client.metrics import PHASES, MetricsServer, PeerCollector

STATUS = {"peer_id": "B", "environment": "prod", "incarnation": "i-1", "phase": "handover",
          "endpoint": "127.0.0.1:5000", "stats": {"handled": 7, "acks": 5, "sent": 0},
          "replay": {"stage": "handover", "replayed": 1200, "duplicates_dropped": 3,
                     "forwarded": 40, "retries": 1, "barrier": 991, "replay_ms": 2500.0,
                     "handover_ms": 120.0},
          "held": {"messages": 12, "bytes": 3400, "peak_messages": 900, "peak_bytes": 81000,
                   "limit_messages": 10000, "limit_bytes": 67108864, "refused": 25,
                   "superseded": 850}}


def _text(status: dict) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PeerCollector(lambda: status))
    return generate_latest(registry).decode()


def test_counters_phase_and_replay_figures() -> None:
    text = _text(STATUS)
    assert 'tidemark_peer_handled_total{peer="B"} 7.0' in text
    assert 'tidemark_peer_acks_total{peer="B"} 5.0' in text
    assert 'tidemark_peer_replayed_total{peer="B"} 1200.0' in text
    assert 'tidemark_peer_forwarded_total{peer="B"} 40.0' in text
    assert 'tidemark_peer_held_messages{peer="B"} 12.0' in text
    assert 'tidemark_peer_held_peak_bytes{peer="B"} 81000.0' in text
    assert 'tidemark_peer_held_refused_total{peer="B"} 25.0' in text
    assert 'tidemark_peer_replay_duplicates_dropped_total{peer="B"} 3.0' in text
    assert 'tidemark_peer_replay_seconds{peer="B"} 2.5' in text
    assert 'tidemark_peer_handover_seconds{peer="B"} 0.12' in text
    assert 'tidemark_peer_replay_barrier{peer="B"} 991.0' in text
    assert 'tidemark_peer_info{endpoint="127.0.0.1:5000",environment="prod",' \
           'incarnation="i-1",peer="B"} 1.0' in text
    ones = [p for p in PHASES if f'tidemark_peer_phase{{peer="B",tidemark_peer_phase="{p}"}} 1.0'
            in text]
    assert ones == ["handover"]


def test_without_replay_there_are_no_replay_metrics() -> None:
    text = _text({**STATUS, "phase": "normal", "replay": None})
    assert "tidemark_peer_replayed_total" not in text
    assert 'tidemark_peer_phase{peer="B",tidemark_peer_phase="normal"} 1.0' in text


def test_served_over_http_and_read_at_scrape_time() -> None:
    status = dict(STATUS, stats={"handled": 1})
    server = MetricsServer(PeerCollector(lambda: status), "127.0.0.1:0")
    try:
        url = f"http://{server.endpoint}/metrics"
        first = urllib.request.urlopen(url, timeout=10).read().decode()
        status["stats"] = {"handled": 2}
        second = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        server.close()
    assert 'tidemark_peer_handled_total{peer="B"} 1.0' in first
    assert 'tidemark_peer_handled_total{peer="B"} 2.0' in second


def test_bad_bind_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        MetricsServer(PeerCollector(lambda: STATUS), "9108")
