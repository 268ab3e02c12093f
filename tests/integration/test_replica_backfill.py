"""Backfill after deleteRecords, missing data spliced into the loss ledger, and config
changes (add a node that joins, backfills and is promoted; remove a node) on real node
processes, real Kafka and real LevelDB."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.replicas import ends, load_to_cut, replica_stack, status, txlog_ust
from tests.support import generate_load, wait_for
from tidemark.gossip.service import ReplicaClient as Peers
from tidemark.gossip.service import unpack_records
from tidemark.log.offsets import delete_records
from tidemark.replica.config import load_cluster_file
from tidemark.stack.launcher import ProcessSpec
from tidemark.stack.processes import free_ports
from tidemark.stack.replicas import CONFIG_NAME, plan

pytestmark = pytest.mark.integration
HOUR = 3_600_000


def _node(doc: dict | None, node: str) -> dict:
    return next((n for n in (doc or {}).get("nodes", []) if n["id"] == node), {})


def _complete(stack, node: str, target: dict[str, int]) -> bool:
    asked = node if node in ("p0r0", "p0r1") else "p0r0"  # p0r2 is not in the TOML
    parts = _node(status(stack, asked), node).get("partitions", {})
    return all(tp in parts and parts[tp]["base"][1] == o and not parts[tp]["detached"]
               for tp, o in target.items())


def _records(address: str, k: int, end: int) -> list:
    peers = Peers()
    try:
        return unpack_records(peers.call(address, "Fetch",
                                         f'{{"partition": {k}, "start": 0, "end": {end}}}'
                                         .encode(), timeout=30))
    finally:
        peers.close()


def test_backfill_from_peer_after_delete_records(bootstrap: str, tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x2", min_age_ms=HOUR) as stack:
        settings = stack.settings()
        first = load_to_cut(stack, 2000, seed=4)
        stack.kill("p0r1")
        generate_load(settings, peers=30, messages=2000, seed=5)
        second = ends(stack)
        wait_for(lambda: _complete(stack, "p0r0", second), 60, what="p0r0 at the ends")
        starts = delete_records(settings, "txlog",
                                {int(tp.split("/")[1]): o - 100 for tp, o in second.items()})
        assert all(starts[k] > first[f"txlog/{k}"] for k in starts)

        stack.up(extra=[lambda s: plan(s, "1x2")], timeout_s=60)
        wait_for(lambda: _complete(stack, "p0r1", second), 60, what="p0r1 backfilled")
        wait_for(lambda: txlog_ust(status(stack)) == second, 30, what="cut at the ends")
        cf = load_cluster_file(stack.state_dir / CONFIG_NAME)
        for k in range(4):
            theirs = _records(cf.nodes["p0r0"].address, k, second[f"txlog/{k}"])
            mine = _records(cf.nodes["p0r1"].address, k, second[f"txlog/{k}"])
            assert mine == theirs and len(mine) == second[f"txlog/{k}"]
        metrics = urllib.request.urlopen(
            f"http://127.0.0.1:{cf.nodes['p0r1'].metrics_port}/metrics", timeout=10).read()
        assert b"tidemark_replica_backfilled_records_total" in metrics
        assert status(stack)["loss_ledger"] == []


def test_missing_data_is_spliced_and_recorded(bootstrap: str, tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x2", min_age_ms=HOUR) as stack:
        settings = stack.settings()
        first = load_to_cut(stack, 1000, seed=6)
        stack.kill("p0r0")
        stack.kill("p0r1")
        generate_load(settings, peers=30, messages=1000, seed=7)
        second = ends(stack)
        starts = delete_records(settings, "txlog",
                                {int(tp.split("/")[1]): o - 50 for tp, o in second.items()})
        stack.up(extra=[lambda s: plan(s, "1x2")], timeout_s=60)
        wait_for(lambda: txlog_ust(status(stack)) == second, 60, what="cut past the lost range")
        doc = wait_for(lambda: (lambda d: d if d and len(d["loss_ledger"]) >= 8 else None)(
            status(stack)), 60, what="losses from both replicas in the ledger")
        lost = {(e["node"], e["partition"]): (e["start"], e["end"]) for e in doc["loss_ledger"]}
        for node in ("p0r0", "p0r1"):
            for k in range(4):
                assert lost[(node, k)] == (first[f"txlog/{k}"], starts[k])
        cf = load_cluster_file(stack.state_dir / CONFIG_NAME)
        metrics = urllib.request.urlopen(
            f"http://127.0.0.1:{cf.nodes['p0r0'].metrics_port}/metrics", timeout=10).read()
        assert b"tidemark_replica_lost_offsets_total" in metrics


def test_add_node_joins_backfills_and_counts_then_remove_node(bootstrap: str,
                                                            tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x2", min_age_ms=HOUR) as stack:
        settings = stack.settings()
        config = str(stack.state_dir / CONFIG_NAME)
        first = load_to_cut(stack, 1500, seed=8)
        delete_records(settings, "txlog", {int(tp[6:]): o - 100 for tp, o in first.items()})

        port = free_ports(1)[0]
        cli = [sys.executable, "-m", "tidemark", "cluster"]
        out = subprocess.run(cli + ["add-node", "p0r2", "--partition", "p0", "--address",
                                    f"127.0.0.1:{port}", "--config", config],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        stack.ensure(ProcessSpec("p0r2", "replica", [sys.executable, "-m", "tidemark",
                                                     "replica", "run", "--config", config,
                                                     "--node", "p0r2"],
                                 f"127.0.0.1:{port}", ready_port=port), 60)
        generate_load(settings, peers=30, messages=500, seed=9)
        second = ends(stack)

        def promoted() -> dict | None:
            doc = status(stack, "p0r0")
            row = _node(doc, "p0r2")
            return doc if row.get("role") == "replica" and doc["epoch"] >= 3 else None
        wait_for(promoted, 60, what="p0r2 promoted after catching up")
        wait_for(lambda: _complete(stack, "p0r2", second), 30, what="p0r2 at the ends")
        doc = wait_for(lambda: (lambda d: d if d and txlog_ust(d) == second else None)(
            status(stack, "p0r0")), 30, what="cut with p0r2 counting")
        assert doc["ust_epoch"] >= 3  # computed over the epoch in which p0r2 counts

        out = subprocess.run(cli + ["remove-node", "p0r1", "--config", config],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        wait_for(lambda: not stack.alive(next(p for p in stack.processes() if p.name == "p0r1")),
                 30, what="p0r1 leaving after its removal")
        generate_load(settings, peers=30, messages=500, seed=10)
        third = ends(stack)
        doc = wait_for(lambda: (lambda d: d if d and txlog_ust(d) == third else None)(
            status(stack, "p0r0")), 60, what="cut rising without p0r1")
        assert sorted(n["id"] for n in doc["nodes"]) == ["p0r0", "p0r2"]
        out = subprocess.run(cli + ["remove-node", "p0r0", "--config", config],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr  # p0r2 still counts for p0
        out = subprocess.run(cli + ["remove-node", "p0r2", "--config", config],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and "no counting replica" in out.stderr


def test_replica_with_wiped_store_rejoins_before_counting(bootstrap: str, tmp_path: Path) -> None:
    import shutil
    with replica_stack(bootstrap, tmp_path / "stack", "1x2", min_age_ms=HOUR) as stack:
        first = load_to_cut(stack, 1500, seed=13)
        stack.kill("p0r1")
        shutil.rmtree(stack.state_dir / "replicas" / "p0r1")
        stack.up(extra=[lambda s: plan(s, "1x2")], timeout_s=60)
        doc = status(stack, "p0r0")
        assert txlog_ust(doc) == first  # the cut never went down
        wait_for(lambda: (lambda d: d and d["epoch"] >= 3 and
                          _node(d, "p0r1").get("role") == "replica")(status(stack, "p0r0")),
                 60, what="p0r1 rejoined through joining and promoted again")
        assert _complete(stack, "p0r1", first)
