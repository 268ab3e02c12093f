"""``tidemark local up --prometheus`` on the session's Kafka cluster: a real Prometheus (the
Debian binary) scraping 1x2 replica nodes and the Spark queues job of a stack of its own
(fresh topics), with the alert rules loaded. Every expression of the Grafana dashboard
returns data from it, every alert expression evaluates without error, a killed node raises
TidemarkReplicaDown, ``local status`` shows Prometheus and ``local down`` stops it.

The Spark panels need the job (``--spark``: a minute or two of start-up); their cases are
marked ``spark``, and with ``-m "not spark"`` the stack starts without the job."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import cluster
from tidemark.log.topics import delete_topic_set
from tidemark.stack.processes import is_alive

pytestmark = [pytest.mark.integration, pytest.mark.ops,
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="prometheus not on PATH (make test installs it)")]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "deploy" / "grafana" / "tidemark.json").read_text())
RULES = [r for g in yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml")
                                   .read_text())["groups"] for r in g["rules"]]
PANELS = [(p["title"], t["refId"], t["expr"]) for p in DASHBOARD["panels"]
          if p["type"] != "row" for t in p["targets"]]


def _needs_job(expr: str) -> bool:
    return "tidemark_queues_" in expr


def _spark_wanted(request: pytest.FixtureRequest) -> bool:
    """Whether a selected test of this module needs the queues job."""
    return any(item.get_closest_marker("spark") is not None
               and getattr(item, "module", None) is request.module
               for item in request.session.items)


class Stack:
    """The CLI on the module's state folder, and Prometheus's HTTP API."""

    def __init__(self, state: Path, env: dict[str, str]) -> None:
        self.state, self.env = state, env
        self.status: dict[str, Any] = {}

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "tidemark", *args], env=self.env,
                              capture_output=True, text=True, timeout=600)
        if check:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.status['prometheus']['url']}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as resp:
            doc = json.loads(resp.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[dict]:
        return list(self.api("query", query=expr)["result"])


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, bootstrap: str,
          tmp_path_factory: pytest.TempPathFactory) -> Any:
    state = tmp_path_factory.mktemp("prometheus-stack") / "state"
    prefix = f"pm{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "TIDEMARK_BOOTSTRAP": bootstrap, "TIDEMARK_TOPIC_PREFIX": prefix,
           "TIDEMARK_PARTITIONS": "2", "TIDEMARK_STATE_DIR": str(state), **cluster.client_env()}
    s = Stack(state, env)
    spark = ["--spark"] if _spark_wanted(request) else []
    try:
        s.status = json.loads(s.cli("local", "up", "--replicas", "1x2", "--prometheus", *spark,
                                    "--timeout", "300", "--json").stdout)
        # traffic: Sends and acks through txlog, the job's queues rows, ingest on both nodes
        s.cli("load", "--peers", "5", "--messages", "3000", "--ack-ratio", "0.5", "--json")
        yield s
    finally:
        s.cli("local", "down", "--grace", "10", check=False)
        delete_topic_set(cluster.settings(bootstrap=bootstrap, partitions=2,
                                          topic_prefix=prefix))


def _finite(result: list[dict]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result)


@pytest.fixture(scope="module")
def panel_data(stack: Stack) -> dict[str, list[dict]]:
    """Each panel expression's last answer, polled until every one has a finite value (or
    150 s passed). Traffic keeps coming meanwhile (a small load every 15 s): the duration
    quantiles are rates over a minute, NaN once the window holds no batch."""
    wanted = [e for _, _, e in PANELS if stack.status["spark"] or not _needs_job(e)]
    answers: dict[str, list[dict]] = {}
    deadline = time.monotonic() + 150
    next_load = time.monotonic()
    while time.monotonic() < deadline:
        if time.monotonic() >= next_load:
            stack.cli("load", "--peers", "5", "--messages", "300", "--ack-ratio", "0.5")
            next_load = time.monotonic() + 15
        for expr in wanted:
            if not _finite(answers.get(expr, [])):
                answers[expr] = stack.query(expr)
        if all(_finite(answers[e]) for e in wanted):
            break
        time.sleep(2)
    return answers


def test_status_shows_prometheus(stack: Stack) -> None:
    prom = json.loads(stack.cli("local", "status", "--json").stdout)["prometheus"]
    assert prom["up"] and prom["address"].startswith("127.0.0.1:")
    assert prom["url"] == f"http://{prom['address']}"
    assert "prometheus" in stack.cli("local", "status").stdout
    assert (stack.state / "prometheus" / "data").is_dir()
    with urllib.request.urlopen(f"{prom['url']}/-/ready", timeout=10) as resp:
        assert resp.status == 200


def test_every_node_is_a_healthy_target(stack: Stack) -> None:
    def health() -> dict[str, str]:
        return {t["labels"]["job"] + "/" + t["labels"].get("node", ""): t["health"]
                for t in stack.api("targets")["activeTargets"]}
    deadline = time.monotonic() + 60
    want = {"tidemark-replica/p0r0", "tidemark-replica/p0r1", "prometheus/"}
    if stack.status["spark"]:
        want.add("tidemark-queues/")
    while time.monotonic() < deadline and not all(health().get(w) == "up" for w in want):
        time.sleep(1)
    assert {w: health().get(w) for w in want} == {w: "up" for w in want}


def test_every_alert_rule_is_loaded_and_evaluates(stack: Stack) -> None:
    for rule in RULES:
        stack.query(rule["expr"])  # status success: the expression is valid here
    deadline = time.monotonic() + 30
    while True:
        loaded = {r["name"]: r for g in stack.api("rules")["groups"] for r in g["rules"]}
        if all(loaded.get(r["alert"], {}).get("health") == "ok" for r in RULES) or \
                time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {r["alert"]: loaded[r["alert"]]["health"] for r in RULES} == \
        {r["alert"]: "ok" for r in RULES}


@pytest.mark.parametrize("title,ref,expr", [
    pytest.param(*p, id=f"{p[0]}/{p[1]}",
                 marks=[pytest.mark.spark] if _needs_job(p[2]) else []) for p in PANELS])
def test_panel_returns_data(stack: Stack, panel_data: dict[str, list[dict]], title: str,
                            ref: str, expr: str) -> None:
    if _needs_job(expr) and not stack.status["spark"]:
        pytest.skip("the stack runs without the queues job")
    answer = panel_data[expr]
    assert _finite(answer), f"{title} ({ref}): {expr} -> {answer}"


def test_killed_node_raises_replica_down(stack: Stack) -> None:
    stack.cli("local", "kill", "p0r1")
    deadline = time.monotonic() + 60
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = {a["labels"].get("node", ""): a["state"] for a in stack.api("alerts")["alerts"]
                  if a["labels"]["alertname"] == "TidemarkReplicaDown"}
        if states.get("p0r1") in ("pending", "firing"):
            break
        time.sleep(1)
    assert states.get("p0r1") in ("pending", "firing"), states
    assert "p0r0" not in states
    # `up` again restarts the node and keeps the same Prometheus (it rereads its config)
    before = stack.status["prometheus"]
    again = json.loads(stack.cli("local", "up", "--timeout", "120", "--json").stdout)
    assert again["prometheus"]["pid"] == before["pid"]
    assert again["prometheus"]["address"] == before["address"]


def test_down_stops_prometheus(stack: Stack) -> None:
    pid = stack.status["prometheus"]["pid"]
    stopped = json.loads(stack.cli("local", "down", "--json").stdout)["stopped"]
    assert "prometheus" in stopped
    assert not is_alive(pid)
