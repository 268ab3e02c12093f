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

from tests.replicas import ends, replica_stack, status, txlog_ust
from tests.support import generate_load, wait_for
from tidemark.log.consumer import LogConsumer
from tidemark.log.offsets import end_offsets
from tidemark.log.wire import default_codec
from tidemark.stack.replicas import CONFIG_NAME

pytestmark = pytest.mark.integration
P0 = ("txlog/0", "txlog/2")  # owned by p0r0 and p0r1 (k mod 2 == 0)


def _tidemark(stack, *args: str) -> subprocess.CompletedProcess:
    """Run the real CLI against the test's stack (env carries bootstrap and topic prefix)."""
    proc = subprocess.run([sys.executable, "-m", "tidemark", *args, "--state-dir",
                           str(stack.state_dir)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_cut_held_back_by_killed_replica_then_recovers(bootstrap: str, tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "2x2") as stack:
        up = json.loads(_tidemark(stack, "local", "up", "--replicas", "2x2", "--json").stdout)
        assert sorted(r["id"] for r in up["replicas"] if r["up"]) == ["p0r0", "p0r1", "p1r0",
                                                                     "p1r1"]
        _tidemark(stack, "load", "--peers", "40", "--messages", "4000", "--seed", "1")
        target = ends(stack)
        wait_for(lambda: txlog_ust(status(stack)) == target, 60, what="cut at the log ends")

        # the CLI answers with the documented JSON shape
        out = subprocess.run([sys.executable, "-m", "tidemark", "replica", "status", "--json",
                              "--config", str(stack.state_dir / CONFIG_NAME)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert {"epoch", "nodes", "ust", "gc_point", "held_back_by", "loss_ledger"} <= set(doc)
        assert sorted(n["id"] for n in doc["nodes"]) == ["p0r0", "p0r1", "p1r0", "p1r1"]
        node = next(n for n in doc["nodes"] if n["id"] == "p0r0")
        assert set(node["partitions"]["txlog/0"]) >= {"base", "detached", "log_end"}
        assert all(doc["gc_point"][tp] <= doc["ust"][tp] for tp in doc["ust"])
        assert doc["ust_ms"] > 0
        assert doc["ust_epoch"] == doc["epoch"] == 1  # the cut is tagged with its epoch
        first_ust_ms = doc["ust_ms"]

        _tidemark(stack, "local", "kill", "p0r1")
        _tidemark(stack, "load", "--peers", "40", "--messages", "3000", "--seed", "2")
        later = ends(stack)
        listed = json.loads(_tidemark(stack, "local", "status", "--json").stdout)
        assert {r["id"]: r["up"] for r in listed["replicas"]}["p0r1"] is False

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
        assert first_ust_ms <= doc["ust_ms"]

        _tidemark(stack, "local", "up", "--replicas", "2x2")
        wait_for(lambda: txlog_ust(status(stack)) == later, 60, what="cut back at the ends")
        wait_for(lambda: (status(stack, "p0r0") or {}).get("held_back_by", 1) is None, 30,
                 what="nobody holding the cut back")


def test_poison_record_goes_to_deadletter_and_node_continues(bootstrap: str,
                                                            tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x1") as stack:
        settings = stack.settings()
        producer = Producer(settings.producer_config())
        producer.produce(settings.topic("txlog"), b"not avro at all", b"peer-x", partition=0)
        good = default_codec().encode("Send", {
            "message_id": "m", "sender": "a", "recipient": "peer-x", "environment": "default",
            "message_type": "t", "payload": b"x" * 50, "timestamp_ms": 1, "delivery_count": 0})
        truncated = good[:30]  # a valid Send header with a cut body
        producer.produce(settings.topic("txlog"), truncated, b"peer-x", partition=0)
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
            values = {m.value() for m in found}
            return b"not avro at all" in values and truncated in values
        wait_for(poll, 30, what="both poison records in deadletter")
        consumer.close()
        msg = next(m for m in found if m.value() == b"not avro at all")
        headers = dict(msg.headers())
        assert headers["tidemark.reason"] == b"bad marker 6e6f, expected c301"  # b"no"
        assert headers["tidemark.offset"] == b"0"
        cut = dict(next(m for m in found if m.value() == truncated).headers())
        assert cut["tidemark.reason"].startswith(b"corrupt or truncated Send body")
        assert cut["tidemark.offset"] == b"1" and cut["tidemark.topic"] == \
            settings.topic("txlog").encode()
        assert end_offsets(settings, "txlog")[0] == target["txlog/0"]


def test_pin_holds_gc_point_until_released(bootstrap: str, tmp_path: Path) -> None:
    from tidemark.gossip.service import ReplicaClient as Peers
    from tidemark.replica.config import load_cluster_file
    with replica_stack(bootstrap, tmp_path / "stack", "1x1") as stack:
        settings = stack.settings()
        address = load_cluster_file(stack.state_dir / CONFIG_NAME).nodes["p0r0"].address
        generate_load(settings, peers=10, messages=500, ack_ratio=1.0, seed=11)
        first = ends(stack)
        wait_for(lambda: (status(stack) or {}).get("gc_point", {}).get("txlog/0")
                 == first["txlog/0"], 60, what="GC point at the ends")
        peers = Peers()
        pin = peers.call_json(address, "Pin", {"barrier": {"txlog/0": first["txlog/0"]},
                                               "lease_ms": 600_000})
        generate_load(settings, peers=10, messages=500, ack_ratio=1.0, seed=12)
        second = ends(stack)
        doc = wait_for(lambda: (lambda d: d if d and txlog_ust(d) == second else None)(
            status(stack)), 60, what="cut at the new ends")
        assert [p["pin"] for p in doc["pins"]] == [pin["pin"]]
        wait_for(lambda: status(stack)["gc_point"]["txlog/1"] == second["txlog/1"], 30,
                 what="unpinned partitions' GC point following the cut")
        # more load, and the unpinned partitions' GC point following it again: several
        # gossip and GC periods later, txlog/0 is still held at the pin
        generate_load(settings, peers=10, messages=300, ack_ratio=1.0, seed=13)
        third = ends(stack)
        doc = wait_for(lambda: (lambda d: d if d and all(
            d["gc_point"][tp] == third[tp] for tp in third if tp != "txlog/0") else None)(
            status(stack)), 60, what="unpinned partitions' GC point at the newer ends")
        assert doc["gc_point"]["txlog/0"] == first["txlog/0"] < third["txlog/0"]
        second = third
        assert peers.call_json(address, "Unpin", {"pin": pin["pin"]}) == {"released": True}
        peers.close()
        doc = wait_for(lambda: (lambda d: d if d and d["gc_point"]["txlog/0"] ==
                                second["txlog/0"] else None)(status(stack)), 30,
                       what="GC point released")
        # everything was acked and old enough: released and compacted up to the GC point
        wait_for(lambda: status(stack)["nodes"][0]["partitions"]["txlog/0"]["base"][0]
                 == second["txlog/0"], 30, what="interval map compacted to the GC point")
        from tidemark.gossip.service import unpack_records
        peers = Peers()
        left = unpack_records(peers.call(address, "Fetch", json.dumps(
            {"partition": 0, "start": 0, "end": second["txlog/0"]}).encode(), timeout=10))
        peers.close()
        assert left == []  # every Send was acked, so Sends and Acks were all released
