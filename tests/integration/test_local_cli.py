"""The CLI as a user runs it: local up/status/kill/up/down, load, bench produce."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cluster
from tidemark.log.consumer import read_to_end
from tidemark.log.topics import describe_topics
from tidemark.log.wire import default_codec
from tidemark.stack.launcher import LocalStack
from tidemark.stack.processes import is_alive

pytestmark = pytest.mark.integration


def tidemark(*args: str, state: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = cluster.apart(os.environ)
    env["TIDEMARK_STATE_DIR"] = str(state)
    proc = subprocess.run([sys.executable, "-m", "tidemark", *args], env=env,
                          capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def cli_stack(tmp_path_factory: pytest.TempPathFactory):
    if os.environ.get("TIDEMARK_BOOTSTRAP"):
        pytest.skip("this test starts its own stack through the CLI")
    state = tmp_path_factory.mktemp("cli") / "state"
    with cluster.elsewhere():  # a plaintext cluster of its own: the session's users stay out
        tidemark("local", "up", "--brokers", "3", state=state)
        yield state
        tidemark("local", "down", state=state, check=False)


def test_up_status_topics(cli_stack: Path) -> None:
    status = json.loads(tidemark("local", "status", "--json", state=cli_stack).stdout)
    assert [b["id"] for b in status["brokers"]] == [1, 2, 3]
    assert all(b["up"] and b["address"].startswith("127.0.0.1:") for b in status["brokers"])
    assert status["bootstrap"] == ",".join(b["address"] for b in status["brokers"])
    assert status["replicas"] == [] and status["spark"] is None
    info = describe_topics(LocalStack(cli_stack).settings())
    assert len(info) == 6
    assert all(t["replication_factor"] == 3 and t["min.insync.replicas"] == 2
               for t in info.values())


def test_load_counts_match_a_plain_consumer(cli_stack: Path) -> None:
    out = tidemark("load", "--peers", "20", "--messages", "5000", "--ack-ratio", "0.4",
                   "--json", state=cli_stack).stdout
    summary = json.loads(out)
    assert summary["sent"] == 5000 and 1500 < summary["acked"] < 2500
    assert sum(p["sent"] for p in summary["peers"].values()) == 5000
    assert sum(p["acked"] for p in summary["peers"].values()) == summary["acked"]
    settings = LocalStack(cli_stack).settings()
    want = sum(summary["end_offsets"].values())
    msgs = [m for batch in read_to_end(settings, "txlog") for m in batch]
    decode = default_codec().decode
    counts: dict[str, dict[str, int]] = {}
    ack_records = 0
    for m in msgs:
        d = decode(m.value())
        peer = m.key().decode()
        row = counts.setdefault(peer, {"sent": 0, "acked": 0})
        if d.name == "Send":
            row["sent"] += 1
        else:  # signed AckBatch records (the local stack's CA signs), or single-id Acks
            row["acked"] += len(d.record.get("message_ids", [None]))
            ack_records += 1
    assert len(msgs) == want
    assert counts == summary["peers"]
    assert want == summary["sent"] + ack_records


@pytest.mark.load  # a bench (about a minute): under `make load`, beside bench catchup's test
def test_bench_produce_prints_both_rates(cli_stack: Path) -> None:
    out = tidemark("bench", "produce", "--messages", "20000", "--rounds", "1", "--json",
                   state=cli_stack).stdout
    result = json.loads(out)
    assert result["raw_msgs_per_s"] > 0 and result["log_msgs_per_s"] > 0
    assert result["ratio"] == pytest.approx(result["log_msgs_per_s"] / result["raw_msgs_per_s"],
                                            abs=0.01)
    text = tidemark("bench", "produce", "--messages", "5000", "--rounds", "1",
                    state=cli_stack).stdout
    assert "raw confluent-kafka producer" in text and "ratio" in text


def test_kill_then_up_restarts_only_the_missing_broker(cli_stack: Path) -> None:
    before = {b["id"]: b["pid"] for b in
              json.loads(tidemark("local", "status", "--json", state=cli_stack).stdout)["brokers"]}
    tidemark("local", "kill", "broker-2", state=cli_stack)
    after_kill = json.loads(tidemark("local", "status", "--json", state=cli_stack).stdout)
    assert [b["up"] for b in after_kill["brokers"]] == [True, False, True]
    tidemark("local", "up", state=cli_stack)
    after = {b["id"]: b["pid"] for b in
             json.loads(tidemark("local", "status", "--json", state=cli_stack).stdout)["brokers"]}
    assert after[1] == before[1] and after[3] == before[3] and after[2] != before[2]


def test_errors_are_one_line(cli_stack: Path) -> None:
    proc = tidemark("local", "kill", "no-such", state=cli_stack, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "no process named" in proc.stderr
    bad = cli_stack.parent / "bad.toml"
    bad.write_text("[kafka\n")
    proc = tidemark("load", "--config", str(bad), state=cli_stack, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("tidemark: error: ")
    assert "Traceback" not in proc.stderr


def test_down_leaves_no_process(cli_stack: Path) -> None:
    """Last in the module: takes the module's stack down (the fixture's own down is then a
    no-op)."""
    pids = [b["pid"] for b in json.loads(
        tidemark("local", "status", "--json", state=cli_stack).stdout)["brokers"]]
    assert pids and all(is_alive(p) for p in pids)
    tidemark("local", "down", state=cli_stack)
    assert not any(is_alive(p) for p in pids)
    out = subprocess.run(["pgrep", "-f", str(cli_stack)], capture_output=True, text=True).stdout
    assert out.strip() == ""
