"""``tidemark bench catchup`` as a user runs it, with small parameters, on real replica node
processes (2x2) and the real Spark queues job, both processes of one local stack on the
session's Kafka cluster: without the job it says what it needs; with it, the peer goes down,
comes back to normal with the traffic going on, and nothing it was sent is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replicas import replica_stack
from tidemark.demo.catchup_bench import NEEDS, render
from tidemark.stack.launcher import LocalStack
from tidemark.stack.spark import plan as spark_plan

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.load,
              pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with replica_stack(bootstrap, tmp_path_factory.mktemp("catchup") / "stack", "2x2") as s:
        yield s


def _bench(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIDEMARK_STATE_DIR": str(stack.state_dir)}
    return subprocess.run([sys.executable, "-m", "tidemark", "bench", "catchup", *args],
                          env=env, capture_output=True, text=True, timeout=800)


def test_bench_catchup_measures_a_restart_under_traffic(stack: LocalStack,
                                                        tmp_path: Path) -> None:
    missing = _bench(stack, "--json")
    assert missing.returncode != 0
    assert f"tidemark: error: {NEEDS}" in missing.stderr.splitlines()
    assert missing.stdout == ""

    stack.up(extra=[spark_plan], timeout_s=300)
    proc = _bench(stack, "--down", "8", "--rate", "300", "--after", "2", "--live", "3",
                  "--folder", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["normal_reached"] and r["time_to_normal_s"] > 0
    assert 0 < r["time_to_normal_from_start_call_s"] <= r["time_to_normal_s"]
    assert r["time_to_normal_sampled_s"] is not None
    assert r["lost"] == 0 and r["sent"] > 0, r
    assert r["applied_twice"] == 0 and r["out_of_order"] == 0 and r["unexpected"] == 0, r
    # sent_while_down counts the senders' last progress reports (sampled, sends in flight
    # included) and backlog_records the txlog end offsets: equal up to those few in flight
    assert r["sent_while_down"] > 0
    assert r["backlog_records"] >= 0.9 * r["sent_while_down"], r
    assert r["replayed"] + r["forwarded"] > 0
    assert r["raw_records"] == r["backlog_records"] and r["raw_seconds"] > 0
    # the report rounds the ratio to one decimal: equal up to that rounding
    assert r["ratio"] == pytest.approx(r["time_to_normal_s"] / r["raw_seconds"], abs=0.051)
    held = r["held"]
    for key in ("peak_messages", "peak_bytes", "limit_messages", "limit_bytes", "refused",
                "within_bound"):
        assert key in held, held
    assert r["rss"]["sampled"] and r["rss"]["hwm_mib"] > 0
    assert set(r["cpu"]["core_s"]) == {"peer", "senders", "replicas", "spark", "brokers",
                                       "machine", "rest"}
    assert r["cpu"]["core_s"]["peer"] > 0 and r["cpu"]["core_s"]["spark"] is not None
    assert r["load_before"] and r["load_after"]
    assert "raw_seconds" in json.loads((tmp_path / "summary.json").read_text())
    # progress; on a loaded machine B2 may be normal only once the senders stopped (the run
    # then misses its target, which this test does not judge)
    assert "restart B" in proc.stderr
    assert ("B2 normal" in proc.stderr) == r["normal_under_traffic"], proc.stderr
    assert r["traffic_stopped_s"] > 0
    text = render(r)
    assert "time to normal after the restart" in text and "raw confluent-kafka" in text
