"""The alert rules, their tests, the Prometheus configs and the Grafana dashboard, offline:
``promtool check rules``, ``promtool test rules`` (deploy/prometheus/alerts.test.yml: every
alert firing and not firing), ``promtool check config`` on deploy/prometheus/prometheus.yml
and on the config ``tidemark local up --prometheus`` writes; every metric they name exists;
every alert has its annotations and a runbook section in docs/operations.md; every
dashboard panel is described there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tidemark.peer_client.metrics import PeerCollector
from tidemark.replica.metrics import NodeMetrics
from tidemark.stack.launcher import LocalStack
from tidemark.stack.prometheus import JOBS, rules_file, scrape_targets, write_config
from tidemark.stack.replicas import CONFIG_NAME, write_cluster_file

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
ALERTS = PROM / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "tidemark.json"
OPERATIONS = ROOT / "docs" / "operations.md"

#: The queues job's metrics (spark_streaming/metrics.py), named here should that module not
#: be importable (no Spark extra).
QUEUES_METRICS = {"tidemark_queues_batch_duration_seconds_bucket",
                  "tidemark_queues_batch_duration_seconds_sum",
                  "tidemark_queues_batch_duration_seconds_count",
                  "tidemark_queues_input_rows_total", "tidemark_queues_batches_total",
                  "tidemark_queues_state_rows", "tidemark_queues_last_progress_timestamp_seconds",
                  "tidemark_queues_watermark_lag_seconds"}

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not on PATH (make test installs Debian's"
                                           " prometheus package)")


def promtool(*args: str) -> None:
    out = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def panel_targets() -> list[tuple[str, dict]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t) for p in doc["panels"] if p["type"] != "row" for t in p["targets"]]


def _family_names(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                    "stateset": [""], "gauge": [""], "info": ["_info"]}.get(family.type, [""])
        names |= {family.name + s for s in suffixes}
        names |= {s.name for s in family.samples}
    return names


def known_metrics() -> set[str]:
    """Every series name the replica node, a peer and the queues job export, and up."""
    names = _family_names(NodeMetrics("n1").registry)
    peer = CollectorRegistry()
    peer.register(PeerCollector(lambda: {
        "peer_id": "a", "phase": "normal", "stats": {"dedup_store_ids": 1},
        "held": {}, "replay": {"barrier": 3}}))
    names |= _family_names(peer)
    try:
        from tidemark.spark_streaming.metrics import QueuesMetrics
    except ImportError:
        names |= QUEUES_METRICS
    else:
        names |= _family_names(QueuesMetrics().registry)
    return names | {"up"}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (a name followed by a selector, a range or
    the end of a function's argument)."""
    return set(re.findall(r"\b((?:tidemark|process|python)_[a-z_]+|up)\b(?=\s*[{\[)]|\s*$|"
                          r"\s*(?:==|>|<|unless|offset|and|or)\b)", expr))


# ---- promtool ------------------------------------------------------------------------------

@needs_promtool
def test_promtool_checks_the_rules() -> None:
    promtool("check", "rules", str(ALERTS))


@needs_promtool
def test_promtool_runs_the_rule_tests() -> None:
    promtool("test", "rules", str(PROM / "alerts.test.yml"))


@needs_promtool
def test_promtool_checks_the_deployment_config() -> None:
    promtool("check", "config", str(PROM / "prometheus.yml"))


@needs_promtool
def test_promtool_checks_the_local_stack_config(tmp_path: Path) -> None:
    config = write_config(tmp_path / "prometheus", "127.0.0.1:9090", rules_file())
    promtool("check", "config", str(config))
    assert (tmp_path / "prometheus" / "alerts.yml").read_text() == ALERTS.read_text()
    assert sorted(p.name for p in (tmp_path / "prometheus" / "targets").iterdir()) == sorted(
        f"{stem}.json" for stem in JOBS.values())


# ---- the rules and their tests -------------------------------------------------------------

def test_every_alert_has_annotations_and_a_runbook_section() -> None:
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.MULTILINE)}
    rules = alert_rules()
    assert len(rules) >= 11
    for rule in rules:
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"], rule["alert"]
        assert ann["runbook_url"] == f"docs/operations.md#{rule['alert'].lower()}"
        assert rule["alert"].lower() in anchors, f"no section {rule['alert']} in {OPERATIONS}"
        assert rule["labels"]["severity"] in ("critical", "warning")


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    tests = yaml.safe_load((PROM / "alerts.test.yml").read_text())["tests"]
    cases = [c for t in tests for c in t["alert_rule_test"]]
    for rule in alert_rules():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{rule['alert']}: no firing case"
        assert any(not c["exp_alerts"] for c in mine), f"{rule['alert']}: no quiet case"


def test_alerts_and_panels_name_only_exported_metrics() -> None:
    known = known_metrics()
    exprs = [r["expr"] for r in alert_rules()] + [t["expr"] for _, t in panel_targets()]
    unknown = {(name, e) for e in exprs for name in metric_names(e) if name not in known}
    assert not unknown
    named = {name for e in exprs for name in metric_names(e)}
    assert {"tidemark_replica_ust_offset", "tidemark_replica_gc_point_offset",
            "tidemark_replica_lag_records", "tidemark_peer_phase",
            "tidemark_queues_batch_duration_seconds_bucket"} <= named


# ---- the dashboard -------------------------------------------------------------------------

def test_dashboard_uses_the_datasource_variable() -> None:
    doc = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])
    for p in panels:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])


def test_every_panel_is_described_in_the_operations_doc() -> None:
    text = OPERATIONS.read_text()
    doc = json.loads(DASHBOARD.read_text())
    for p in doc["panels"]:
        if p["type"] != "row":
            assert f"**{p['title']}**" in text, p["title"]


# ---- the local stack's targets -------------------------------------------------------------

def test_scrape_targets_are_the_nodes_metrics_ports(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path)
    assert scrape_targets(stack) == {"replica": [], "queues": [], "peer": []}
    write_cluster_file(tmp_path / CONFIG_NAME, {"bootstrap": "127.0.0.1:1",
                                                "topic_prefix": "x.", "partitions": 2},
                       "1x2", 2)
    from tidemark.replica.config import load_cluster_file
    cf = load_cluster_file(tmp_path / CONFIG_NAME)
    targets = scrape_targets(stack)
    assert targets["replica"] == [
        {"targets": [f"127.0.0.1:{n.metrics_port}"], "labels": {"node": n.node_id}}
        for n in cf.nodes.values()]
    assert targets["queues"] == [] and targets["peer"] == []
