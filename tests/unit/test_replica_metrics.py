"""A replica node's metrics: Prometheus names and units, process and GC metrics beside the
node's own, the two histograms (observed once per gossip round and once per ingest batch),
and one help text per metric."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest

import tidemark.replica.gossiper as gossiper_mod
from tidemark.log.settings import load_settings
from tidemark.replica.gossiper import Gossiper
from tidemark.replica.ingest import Ingestor
from tidemark.replica.metrics import NodeMetrics
from tidemark.replica.store import Store

OFFLINE = load_settings(env={}, bootstrap="127.0.0.1:1", topic_prefix="rm.", partitions=1)


def _observed(metrics: NodeMetrics) -> str:
    """The exposition after one value of every labelled metric and one observation each."""
    metrics.ust.labels("n1", "txlog/0").set(120)
    metrics.gc_point.labels("n1", "txlog/0").set(100)
    metrics.lag.labels("n1", "txlog/0").set(30)
    metrics.held_back.labels("n1", "n2").set(1.5)
    metrics.epoch.set(4)
    metrics.refused_records("signature", 2)
    metrics.lost.labels("n1", "txlog/0").inc(3)
    metrics.applied.inc(5)
    metrics.gossip_round.observe(0.004)
    metrics.ingest_batch.observe(0.02)
    return generate_latest(metrics.registry).decode()


def _names(text: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def test_names_follow_prometheus_conventions() -> None:
    text = _observed(NodeMetrics("n1"))
    names = _names(text)
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total",
            "python_gc_collections_total", "python_gc_objects_collected_total"} <= names
    assert {"tidemark_replica_lag_records", "tidemark_replica_gc_point_offset",
            "tidemark_replica_ust_offset", "tidemark_replica_held_back_seconds",
            "tidemark_replica_epoch"} <= names
    assert {"tidemark_replica_lag", "tidemark_replica_gc_point"}.isdisjoint(names)
    assert {"tidemark_replica_applied_records_total", "tidemark_replica_refused_records_total",
            "tidemark_replica_lost_offsets_total", "tidemark_replica_deadletter_records_total",
            "tidemark_replica_backfilled_records_total",
            "tidemark_replica_backfill_skipped_offsets_total",
            "tidemark_replica_released_records_total"} <= names
    for hist in ("tidemark_replica_gossip_round_seconds",
                 "tidemark_replica_ingest_batch_seconds"):
        assert {f"{hist}_bucket", f"{hist}_sum", f"{hist}_count"} <= names
        assert f'{hist}_count{{node="n1"}} 1.0' in text
        assert f'{hist}_bucket{{le="0.001",node="n1"}}' in text  # 1 ms ...
        assert f'{hist}_bucket{{le="10.0",node="n1"}} 1.0' in text  # ... to 10 s
    assert 'tidemark_replica_ingest_batch_seconds_bucket{le="0.025",node="n1"} 1.0' in text
    assert 'tidemark_replica_ingest_batch_seconds_bucket{le="0.01",node="n1"} 0.0' in text
    assert 'tidemark_replica_lag_records{node="n1",tp="txlog/0"} 30.0' in text


def test_help_texts_are_present_and_distinct() -> None:
    metrics = NodeMetrics("n1")
    _observed(metrics)
    helps = {f.name: f.documentation for f in metrics.registry.collect()
             if f.name.startswith("tidemark_replica_")}
    assert len(helps) == 14, sorted(helps)
    assert all(h.strip() for h in helps.values()), helps
    assert len(set(helps.values())) == len(helps), helps


def test_two_nodes_in_one_process_have_their_own_registries() -> None:
    a, b = NodeMetrics("a"), NodeMetrics("b")  # no duplicate-collector error
    assert "process_resident_memory_bytes" in _names(generate_latest(b.registry).decode())
    assert a.registry is not b.registry


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not on PATH")
def test_promtool_accepts_the_exposition() -> None:
    text = _observed(NodeMetrics("n1"))
    out = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                         capture_output=True, timeout=60, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


# ---- the observations: once per batch, once per round ------------------------------------

class _Consumer:
    def __init__(self, batches: list[list[Any]]) -> None:
        self.batches = batches
        self.raw = SimpleNamespace(get_watermark_offsets=lambda *a, **k: (0, 0),
                                   position=lambda tps: tps)

    def consume_ready(self, max_records: int, timeout: float) -> list[Any]:
        return self.batches.pop(0) if self.batches else []

    def close(self) -> None:
        pass


def test_ingest_observes_once_per_applied_batch(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "s", "n1")
    ingest = Ingestor(OFFLINE, store, "n1")
    ingest.consumer.close()
    ingest.consumer = _Consumer([[object()] * 500, [], [object()] * 3])  # type: ignore[assignment]
    monkeypatch.setattr(ingest, "_apply", lambda msgs: len(msgs))
    metrics = NodeMetrics("n1")
    ingest.on_batch = metrics.ingest_batch.observe
    try:
        assert [ingest.step(0.001) for _ in range(3)] == [500, 0, 3]
    finally:
        ingest.close()
        store.close()
    text = generate_latest(metrics.registry).decode()
    assert 'tidemark_replica_ingest_batch_seconds_count{node="n1"} 2.0' in text  # not 503


def test_gossip_observes_full_rounds_only(monkeypatch: pytest.MonkeyPatch) -> None:
    stopping = threading.Event()
    calls: list[bool] = []

    def fake_round(peers: Any, mine: bytes, others: Any, on_state: Any, timeout: float,
                   pool: Any) -> dict[str, bool]:
        calls.append(on_state is not None)
        if len(calls) == 1:
            g._push.set()  # a push before the next full round: not a round
        else:
            stopping.set()
        return {}

    monkeypatch.setattr(gossiper_mod, "gossip_round", fake_round)
    part = SimpleNamespace(replicas=["n2"], joining=[])
    view = SimpleNamespace(lock=threading.Lock(), node_id="n1",
                           epoch=SimpleNamespace(nodes={"n1": "a:1", "n2": "a:2", "n3": "a:3"},
                                                 partition_of=lambda n: part))
    g = Gossiper.__new__(Gossiper)
    g.view = view  # type: ignore[assignment]  # the parts run() reads
    g.peers = g.pool = None  # type: ignore[assignment]  # only passed to gossip_round
    g.period, g.stopping = 60.0, stopping
    g._push, g._mine = threading.Event(), b""
    metrics = NodeMetrics("n1")
    g.on_round = metrics.gossip_round.observe
    g.run()
    assert calls == [True, False]  # one full round, then one push
    text = generate_latest(metrics.registry).decode()
    assert 'tidemark_replica_gossip_round_seconds_count{node="n1"} 1.0' in text
    assert re.search(r'^tidemark_replica_gossip_round_seconds_sum\{node="n1"\} \S+$', text,
                     re.M)
