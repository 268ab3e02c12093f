"""Peer metrics: the collector over a status document, served over real HTTP."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tidemark.peer_client.metrics import (
    COUNTER_HELP,
    GAUGE_HELP,
    PHASES,
    MetricsServer,
    PeerCollector,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "peer_client.md"

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


#: What a peer that has done nothing yet reports: ``Peer.stats`` before any traffic.
FRESH = {"peer_id": "F", "environment": "prod", "incarnation": "i-2", "phase": "normal",
         "endpoint": "127.0.0.1:5001", "stats": {"sent": 0, "logged": 0},
         "held": {"messages": 0, "bytes": 0, "peak_messages": 0, "peak_bytes": 0,
                  "limit_messages": 10000, "limit_bytes": 67108864, "refused": 0,
                  "superseded": 0}}


def _families(status: dict) -> dict[str, tuple[str, str]]:
    """``{name: (type, help)}`` of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PeerCollector(lambda: status))
    return {f.name: (f.type, f.documentation) for f in registry.collect()}


def test_every_known_counter_is_there_from_zero() -> None:
    text = _text(FRESH)
    for stat in COUNTER_HELP:
        assert f'tidemark_peer_{stat}_total{{peer="F"}} 0.0' in text, stat
    assert 'tidemark_peer_held_refused_total{peer="F"} 0.0' in text
    assert 'tidemark_peer_held_superseded_total{peer="F"} 0.0' in text
    assert "tidemark_peer_dedup_store_ids" not in text  # no dedup store: no level to show
    # and a status document without any stats at all
    text = _text({**FRESH, "stats": {}})
    assert all(f'tidemark_peer_{stat}_total{{peer="F"}} 0.0' in text for stat in COUNTER_HELP)


def test_the_table_covers_what_the_peer_counts() -> None:
    """Every key the peer's code counts under (``stats["..."] +=``) has its own help."""
    root = Path(__file__).resolve().parents[2] / "peer_client"
    counted: set[str] = set()
    for path in root.glob("*.py"):
        counted |= set(re.findall(r'stats\["(\w+)"\]\s*\+=', path.read_text(encoding="utf-8")))
    counted |= {"sent", "logged", "dedup_store_expired",  # added by stats_snapshot
                "unknown_type", "no_handler", "malformed"}  # stats[d.kind] of a FAIL
    assert len(counted) > 20, sorted(counted)  # the scan found them
    assert sorted(counted - COUNTER_HELP.keys()) == []


def test_help_texts_are_distinct_and_unknown_counters_still_export() -> None:
    families = _families({**STATUS, "stats": {"handled": 1, "brand_new": 4,
                                              "dedup_store_ids": 17}})
    helps = [h for name, (_, h) in families.items() if name != "tidemark_peer_brand_new"]
    assert all(h.strip() for h in helps)
    assert len(set(helps)) == len(helps), sorted(helps)
    assert families["tidemark_peer_brand_new"] == ("counter", "the peer's 'brand_new' counter")
    assert families["tidemark_peer_dedup_store_ids"] == ("gauge", GAUGE_HELP["dedup_store_ids"])
    assert "tidemark_peer_dedup_store_ids_total" not in _text(
        {**STATUS, "stats": {"dedup_store_ids": 17}})


def test_the_docs_list_every_counter() -> None:
    doc = DOC.read_text(encoding="utf-8")
    missing = [s for s in COUNTER_HELP if f"`tidemark_peer_{s}_total`" not in doc]
    assert not missing


def test_served_page_holds_process_and_gc_metrics_unless_given_a_registry() -> None:
    server = MetricsServer(PeerCollector(lambda: FRESH), "127.0.0.1:0")
    try:
        own = urllib.request.urlopen(f"http://{server.endpoint}/metrics", timeout=10).read()
    finally:
        server.close()
    for name in (b"process_resident_memory_bytes", b"process_cpu_seconds_total",
                 b"python_gc_collections_total", b'tidemark_peer_handled_total{peer="F"} 0.0'):
        assert name in own, name
    if shutil.which("promtool") is not None:
        out = subprocess.run(["promtool", "check", "metrics"], input=own, capture_output=True,
                             timeout=60, check=False)
        assert out.returncode == 0, out.stdout + out.stderr
    app = CollectorRegistry(auto_describe=False)
    server = MetricsServer(PeerCollector(lambda: FRESH), "127.0.0.1:0", registry=app)
    try:
        theirs = urllib.request.urlopen(f"http://{server.endpoint}/metrics", timeout=10).read()
    finally:
        server.close()
    assert b'tidemark_peer_handled_total{peer="F"} 0.0' in theirs
    assert b"process_resident_memory_bytes" not in theirs
    assert b"tidemark_peer" not in generate_latest(app)  # the collector left it on close
