"""Forged and replayed gossip against a real replica pair (node processes, Kafka, LevelDB,
gRPC over mutual TLS). Once the cut is at the log ends, forged states of p0r0 and p0r1 that
claim a thousand more records than the log holds are pushed to the other node by an
operator, a peer, and a node outside the cluster speaking for them; each node's own
certificate replays its state inflated and stamped a minute ahead. Every one is refused or
ignored: the cut and the GC point stay at the ends, and ``WaitStable`` beyond the ends
stays false."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import grpc
import pytest

from tests.replicas import load_to_cut, replica_stack, status, txlog_ust
from tests.support import wait_for
from tidemark.gossip.node_state import NodeState
from tidemark.gossip.pki import Identity
from tidemark.gossip.service import ReplicaClient
from tidemark.gossip.tls import resolve_transport
from tidemark.replica.config import load_cluster_file
from tidemark.stack.replicas import CONFIG_NAME

pytestmark = pytest.mark.integration


def _client(kind: str, name: str, env: str = "") -> ReplicaClient:
    return ReplicaClient(transport=resolve_transport(Identity(kind, name, env)))


def test_forged_and_replayed_gossip_cannot_move_the_cut(bootstrap: str, tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x2") as stack:
        target = load_to_cut(stack, 2000, seed=7)
        nodes = {n.node_id: n.address for n in
                 load_cluster_file(stack.state_dir / CONFIG_NAME).nodes.values()}
        for node in nodes:  # load_to_cut waits for one node's cut; the check below is on each
            wait_for(lambda n=node: txlog_ust(status(stack, n)) == target, 60,
                     what=f"{node}'s cut at the ends")
        # the real states of txlog/0's owners (as a node would get them), inflated
        outsider = _client("node", "p9r9")  # a valid node certificate, not in the cluster
        probe = NodeState("p9r9", 1, 0, False).encode()
        real = {n: NodeState.decode(outsider.call(nodes[n], "Gossip", probe, 5))
                for n in ("p0r0", "p0r1")}

        def inflated(state: NodeState, ahead_ms: int = 0) -> bytes:
            ranges = tuple(dataclasses.replace(r, base_end=r.base_end + 1000,
                                               log_end=r.log_end + 1000) for r in state.ranges)
            return dataclasses.replace(state, ranges=ranges,
                                       timestamp_ms=int(time.time() * 1000) + ahead_ms).encode()
        for client, what in ((_client("operator", "mallory"), "an operator"),
                             (_client("peer", "mallory", "default"), "a peer"),
                             (outsider, "another node")):
            for victim, node in ((n, a) for n in nodes for a in ("p0r0", "p0r1") if n != a):
                with pytest.raises(grpc.RpcError) as err:
                    client.call(nodes[victim], "Gossip", inflated(real[node]), 5)
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, what
        # each owner's own certificate, replaying its inflated state a minute ahead: ignored
        for node in ("p0r0", "p0r1"):
            own = _client("node", node)
            for victim in nodes:
                if victim != node:
                    own.call(nodes[victim], "Gossip", inflated(real[node], 60_000), 5)
        deadline = time.monotonic() + 3.0  # several gossip rounds and cut runs (200 ms)
        while time.monotonic() < deadline:
            for node in nodes:
                doc = status(stack, node)
                assert doc is not None and txlog_ust(doc) == target, f"{node}'s cut moved"
                assert all(doc["gc_point"][tp] <= target[tp] for tp in target)
        waited = json.loads(outsider.call(nodes["p0r0"], "WaitStable", json.dumps(
            {"partition": 0, "offset": target["txlog/0"] + 500, "timeout_ms": 1000}).encode(),
            5))
        assert waited["reached"] is False and waited["stable_end"] == target["txlog/0"]
