"""No caller can starve a real replica node: node processes (1x2), Kafka, LevelDB and gRPC
over mutual TLS. 200 callers without valid credentials (100 per node) (certificates of another CA) keep
opening silent Replay streams against each node, again as soon as one is refused, while
(1) a peer replays a 20,000-message queue from those nodes, (2) load goes on and the cut
must keep reaching the log ends, (3) a node gossips with them every 50 ms. Every flooding
call is refused at the TLS handshake (no request byte is read, no thread is taken); the
replay completes with every message handled once, the cut moves, and the p99 of a gossip
round stays under 1 s. (Authenticated peers holding silent streams: test_exhaustion.py.)"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.replicas import load_to_cut, replica_stack
from tests.support import wait_for
from tidemark.demo.replay_bench import BenchItem, fill
from tidemark.gossip.node_state import NodeState
from tidemark.gossip.pki import Identity, TlsFiles, init_ca, issue
from tidemark.gossip.service import ReplicaClient, method_path
from tidemark.gossip.tls import Transport, resolve_transport
from tidemark.log.offsets import watermarks
from tidemark.log.partitioner import partition_for_peer
from tidemark.peer_client import Peer, message_type_of
from tidemark.peer_client.replay import ReplicaReplayer
from tidemark.replica.config import load_cluster_file
from tidemark.stack.replicas import CONFIG_NAME

pytestmark = [pytest.mark.integration, pytest.mark.load, pytest.mark.timeout(600)]

QUEUED = 20_000


def test_silent_streams_do_not_starve_a_node_serving_replay_and_gossip(
        bootstrap: str, tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x2") as stack:
        settings = stack.settings()
        env = settings.environment
        nodes = {n.node_id: n.address for n in
                 load_cluster_file(stack.state_dir / CONFIG_NAME).nodes.values()}
        peer_id = "R"
        k = partition_for_peer(peer_id, len(watermarks(settings, "txlog")))
        payload = message_type_of(BenchItem).serializer.encode(BenchItem(b"x" * 150))
        before = load_to_cut(stack, 500, seed=3)
        # R's queue last (fill writes its Sends and queue entries on a quiet partition)
        fill(settings, peer_id, k, QUEUED, payload, True, lambda m: None)

        foreign = tmp_path / "foreign"
        init_ca(foreign, name="not the cluster's")
        trust = resolve_transport(Identity("peer", "x", env)).files.ca  # the real trust
        outcomes: list[str] = []
        stop = threading.Event()

        def flood(i: int, address: str) -> None:
            files = issue(foreign, Identity("peer", f"flood{i}", env), tmp_path / "issued",
                          stem=f"flood{i}-{address.rsplit(':', 1)[1]}")
            client = ReplicaClient(transport=Transport(Identity("peer", f"flood{i}", env),
                                                       TlsFiles(trust, files.cert, files.key)))
            while not stop.is_set():
                try:
                    for _ in client._channel(address).stream_stream(method_path("Replay"))(
                            iter(()), timeout=10):
                        pass
                    outcomes.append("served")
                except grpc.RpcError as exc:
                    outcomes.append(exc.code().name)
                client.close()
                stop.wait(1.0)
        addresses = list(nodes.values())
        flooders = [threading.Thread(target=flood, args=(i, addresses[i % len(addresses)]),
                                     daemon=True) for i in range(200)]
        for t in flooders:
            t.start()
        wait_for(lambda: len(outcomes) >= 200, 60, 0.2, "the flood under way")

        rounds: list[float] = []
        errors: list[str] = []
        gossip = ReplicaClient(transport=resolve_transport(Identity("node", "p9r9")))
        probe = NodeState("p9r9", 1, 0, False).encode()

        def gossiping() -> None:
            while not stop.wait(0.05):
                for address in nodes.values():
                    t0 = time.monotonic()
                    try:
                        gossip.call(address, "Gossip", probe, 5)
                        rounds.append(time.monotonic() - t0)
                    except grpc.RpcError as exc:
                        rounds.append(5.0)
                        errors.append(exc.code().name)
        g = threading.Thread(target=gossiping, daemon=True)
        g.start()
        handled: list[str] = []
        lock = threading.Lock()
        try:
            replayer = ReplicaReplayer(settings, covered=False, barrier_timeout_ms=60_000)
            peer = Peer(peer_id, None, settings, replayer=replayer)

            @peer.batch_handler(BenchItem)
            def on_items(items: list[BenchItem], ctx: Any) -> None:
                with lock:
                    handled.extend(ctx.message_ids)

            peer.start()  # replays the queue from a node under the flood
            wait_for(lambda: len(handled) >= QUEUED, 120, 0.2, "the queue replayed")
            after = load_to_cut(stack, 2000, seed=4)  # the cut reaches the new ends
            peer.stop()
        finally:
            stop.set()
            g.join(10)
        assert sorted(set(handled)) == sorted(f"{peer_id}-{i}" for i in range(QUEUED))
        assert len(handled) == QUEUED, "handled twice"
        assert sum(after.values()) >= sum(before.values()) + 2000, (before, after)
        p99 = statistics.quantiles(rounds, n=100)[98]
        assert len(rounds) > 20 and p99 < 1.0, \
            f"gossip p99 {p99:.3f}s under the flood ({len(rounds)} rounds, errors {errors})"
        for t in flooders:
            t.join(30)
        assert len(outcomes) > 200 and set(outcomes) == {"UNAVAILABLE"}, set(outcomes)
        gossip.close()
        print({"rounds": len(rounds), "gossip_p99_s": round(p99, 3),
               "refused_calls": len(outcomes),
               "replayed": replayer.status()["replayed"]})
