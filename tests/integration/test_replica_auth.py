"""Trust (issue 11 item 9) on real node processes: gossip, status and backfill calls from a
process outside the cluster are refused; a member's forged gossip (a huge claimed cut, a
timestamp from the future) never raises the cut past the replicas' own maps."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from tests.replicas import ends, load_to_cut, replica_stack, status, txlog_ust
from tests.support import generate_load, wait_for
from tidemark.gossip.node_state import NodeState, PartitionRanges
from tidemark.gossip.service import ReplicaClient, method_path
from tidemark.replica.config import load_cluster_file
from tidemark.stack.replicas import CONFIG_NAME

pytestmark = pytest.mark.integration


def test_outside_calls_refused_and_forged_gossip_never_raises_the_cut(
        bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # insecure nodes: this is the cluster secret's HMAC layer (over TLS: tests/security)
    monkeypatch.setenv("TIDEMARK_INSECURE", "1")
    with replica_stack(bootstrap, tmp_path / "stack", "1x2") as stack:
        path = stack.state_dir / CONFIG_NAME
        cf = load_cluster_file(path)
        assert cf.secret  # the local stack generates one
        load_to_cut(stack, 600, seed=41, peers=20)

        address = cf.nodes["p0r0"].address
        forged = NodeState("p0r1", 1, int(time.time() * 1000) + 3_600_000, True,
                           tuple(PartitionRanges("txlog", k, 0, 10**9, 10**9) for k in range(4)),
                           ust={f"txlog/{k}": 10**9 for k in range(4)}).encode()
        channel = grpc.insecure_channel(address)  # a process outside the cluster
        try:
            for method, body in (("Status", b""), ("Gossip", forged),
                                 ("Digest", b'{"partition": 0, "start": 0, "end": 10}'),
                                 ("Fetch", b'{"partition": 0, "start": 0, "end": 10}')):
                with pytest.raises(grpc.RpcError) as err:
                    channel.unary_unary(method_path(method))(body, timeout=5)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, method
        finally:
            channel.close()

        member = ReplicaClient(cf.secret)  # a buggy member: signed, but lying
        try:
            member.call(address, "Gossip", forged, timeout=5)
            claims = NodeState("p0r1", 1, int(time.time() * 1000), True,
                               tuple(PartitionRanges("txlog", k, 0, 1, 1) for k in range(4)),
                               ust={f"txlog/{k}": 10**9 for k in range(4)}).encode()
            member.call(address, "Gossip", claims, timeout=5)
        finally:
            member.close()
        generate_load(stack.settings(), peers=20, messages=300, seed=42)
        later = ends(stack)
        wait_for(lambda: txlog_ust(status(stack, "p0r0")) == later, 60,
                 what="the cut following the real maps again")
        doc = status(stack, "p0r0")
        assert all(o <= later[tp] for tp, o in txlog_ust(doc).items())

        out = subprocess.run([sys.executable, "-m", "tidemark", "replica", "status", "--json",
                              "--config", str(path)], capture_output=True, text=True,
                             timeout=60)  # the CLI with the cluster's file is a member
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["ust"]
