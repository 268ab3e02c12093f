"""A 2x2 replica cluster of real node processes on real Kafka and LevelDB: the stable cut
reaches the log ends, a killed replica holds its partitions' cut back and is named, and a
restart lets the cut reach the ends again; a poison record goes to deadletter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from log.consumer import LogConsumer
from log.load import generate_load
from log.offsets import end_offsets
from replica.local import CONFIG_NAME, plan
from tests.support import wait_for
from test_replica_support import ends, replica_stack, status, txlog_ust

pytestmark = pytest.mark.integration
P0 = ("txlog/0", "txlog/2")  # owned by p0r0 and p0r1 (k mod 2 == 0)


def test_cut_held_back_by_killed_replica_then_recovers(bootstrap: str, tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "2x2") as stack:
        settings = stack.settings()
        generate_load(settings, peers=40, messages=4000, seed=1)
        target = ends(stack)
        wait_for(lambda: txlog_ust(status(stack)) == target, 60, what="cut at the log ends")

        # the CLI answers with the documented JSON shape
        out = subprocess.run([sys.executable, "-m", "log.console", "replica", "status", "--json",
                              "--config", str(stack.state_dir / CONFIG_NAME)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert {"epoch", "nodes", "ust", "gc_point", "held_back_by", "loss_ledger"} <= set(doc)
        assert sorted(n["id"] for n in doc["nodes"]) == ["p0r0", "p0r1", "p1r0", "p1r1"]
        node = next(n for n in doc["nodes"] if n["id"] == "p0r0")
        assert set(node["partitions"]["txlog/0"]) >= {"base", "detached", "log_end"}
        assert all(doc["gc_point"][tp] <= doc["ust"][tp] for tp in doc["ust"])

        stack.kill("p0r1")
        generate_load(settings, peers=40, messages=3000, seed=2)
        later = ends(stack)

        def held() -> dict | None:
            doc = status(stack, "p0r0")
            cut = txlog_ust(doc)
            if not doc or not doc["held_back_by"] or doc["held_back_by"]["node"] != "p0r1":
                return None
            if any(cut[tp] >= later[tp] for tp in P0):
                return None
            if any(cut[tp] != later[tp] for tp in ("txlog/1", "txlog/3")):
                return None
            if next(n for n in doc["nodes"] if n["id"] == "p0r1")["up"]:
                return None
            return doc
        doc = wait_for(held, 60, what="p0r1 named as holding the cut back")
        assert all(doc["ust"][tp] <= target[tp] for tp in P0)
        assert doc["held_back_by"]["seconds"] > 0

        stack.up(extra=[lambda s: plan(s, "2x2")], timeout_s=60)
        wait_for(lambda: txlog_ust(status(stack)) == later, 60, what="cut back at the ends")
        wait_for(lambda: (status(stack, "p0r0") or {}).get("held_back_by", 1) is None, 30,
                 what="nobody holding the cut back")


def test_poison_record_goes_to_deadletter_and_node_continues(bootstrap: str,
                                                            tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x1") as stack:
        settings = stack.settings()
        producer = Producer(settings.producer_config())
        producer.produce(settings.topic("txlog"), b"not avro at all", b"peer-x", partition=0)
        producer.flush(30)
        generate_load(settings, peers=10, messages=500, seed=3)
        target = ends(stack)
        wait_for(lambda: txlog_ust(status(stack)) == target, 60,
                 what="cut past the poison record")
        consumer = LogConsumer(settings)
        consumer.assign({("deadletter", p): -2 for p in range(3)})
        found = []

        def poll() -> bool:
            for msg in consumer.consume_batch(100, 0.5):
                found.append(msg)
            return any(m.value() == b"not avro at all" for m in found)
        wait_for(poll, 30, what="the poison record in deadletter")
        consumer.close()
        msg = next(m for m in found if m.value() == b"not avro at all")
        headers = dict(msg.headers())
        assert b"marker" in headers["tidemark.reason"] or headers["tidemark.reason"]
        assert headers["tidemark.offset"] == b"0"
        assert end_offsets(settings, "txlog")[0] == target["txlog/0"]
