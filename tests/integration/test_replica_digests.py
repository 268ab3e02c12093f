"""Backfill's equality check on a real two-replica cluster (real node processes, Kafka,
LevelDB and gRPC): p0r1 is seeded from a copy of p0r0's store folder (adopted: records
kept, claims dropped), so its ranges really equal p0r0's; backfill claims them by digest
without copying (the node's skipped-offsets counter says how many), and copies only the
one range where the copy was altered."""

from __future__ import annotations

import re
import shutil
import urllib.request
from pathlib import Path

import plyvel
import pytest

from tests.replicas import ends, load_to_cut, replica_stack, status
from tests.support import generate_load, wait_for
from tidemark.gossip.service import ReplicaClient as Peers
from tidemark.gossip.service import unpack_records
from tidemark.replica.config import load_cluster_file
from tidemark.replica.digests import RANGE
from tidemark.replica.store import ADOPT_FILE, data_key
from tidemark.stack.replicas import CONFIG_NAME, plan

pytestmark = pytest.mark.integration
HOUR = 3_600_000


def _node(doc: dict | None, node: str) -> dict:
    return next((n for n in (doc or {}).get("nodes", []) if n["id"] == node), {})


def _records(address: str, k: int, start: int, end: int) -> list:
    peers = Peers()
    try:
        body = f'{{"partition": {k}, "start": {start}, "end": {end}}}'.encode()
        return unpack_records(peers.call(address, "Fetch", body, timeout=30))
    finally:
        peers.close()


def _counter(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    match = re.search(rf"^{name}_total\{{[^}}]*\}} (\S+)$", text, re.M)
    assert match, f"{name} not exported"
    return float(match.group(1))


def test_equal_ranges_of_an_adopted_copy_are_skipped_by_digest(bootstrap: str,
                                                               tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x2", min_age_ms=HOUR) as stack:
        settings = stack.settings()
        first = load_to_cut(stack, 3000, seed=21)
        stack.kill("p0r1")
        stack.kill("p0r0")  # a cold copy: LevelDB files are consistent when closed
        data = stack.state_dir / "replicas"
        shutil.rmtree(data / "p0r1")
        shutil.copytree(data / "p0r0", data / "p0r1")
        db = plyvel.DB(str(data / "p0r1"))
        try:  # one altered record: its range must be copied, not claimed
            original = db.get(data_key(0, 0))
            assert original is not None
            db.put(data_key(0, 0), original[:-1] + bytes([original[-1] ^ 1]))
        finally:
            db.close()
        (data / "p0r1" / ADOPT_FILE).touch()

        stack.up(extra=[lambda s: plan(s, "1x2")], timeout_s=60)
        generate_load(settings, peers=30, messages=500, seed=22)
        second = ends(stack)

        def verified() -> bool:
            doc = status(stack, "p0r0")
            parts = _node(doc, "p0r1").get("partitions", {})
            return (_node(doc, "p0r1").get("role") == "replica"
                    and all(tp in parts and parts[tp]["base"][1] == o and not parts[tp]["detached"]
                            for tp, o in second.items()))
        wait_for(verified, 90, what="p0r1 verified, caught up and promoted")

        cf = load_cluster_file(stack.state_dir / CONFIG_NAME)
        a, b = cf.nodes["p0r0"].address, cf.nodes["p0r1"].address
        for k in range(4):
            end = second[f"txlog/{k}"]
            assert _records(b, k, 0, end) == _records(a, k, 0, end)
        altered = min(RANGE, first["txlog/0"])  # the aligned chunk [0, RANGE) of txlog/0
        port = cf.nodes["p0r1"].metrics_port
        copied = _counter(port, "tidemark_replica_backfilled_records")
        skipped = _counter(port, "tidemark_replica_backfill_skipped_offsets")
        assert copied == len(_records(a, 0, 0, altered)) > 0
        assert skipped == sum(first.values()) - altered > 0
