"""No caller can starve a replica server (real gRPC over mutual TLS): 200 streams that never
send a first message, from peers of the environment, while gossip calls go on. The flood is
refused or cancelled, gossip keeps answering quickly, and the threads come back."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from tests.support import wait_for
from tidemark.gossip.limits import CallLimits
from tidemark.gossip.service import ReplicaClient, method_path, start_server
from tidemark.gossip.tls import Transport
from tidemark.stack.processes import free_ports

ENV = "prod"


def test_call_limits_refuse_the_excess_and_give_back() -> None:
    limits = CallLimits(8, per_caller=2)
    assert limits.peer_threads == 6
    with limits.peer_call("a", True), limits.peer_call("a", True):
        with pytest.raises(Exception, match="already holds 2 streams"), \
                limits.peer_call("a", True):
            pass
        with limits.peer_call("b", True):
            pass
    assert limits.snapshot()["peer_threads_held"] == 0


@pytest.fixture
def node(transport_of: Callable[..., Transport]) -> Iterator[tuple[str, list[Any]]]:
    served: list[Any] = []

    def watch(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        for r in requests:
            served.append(r)
            yield r
    address = f"127.0.0.1:{free_ports(1)[0]}"
    server = start_server(address, {"Gossip": lambda b: b}, workers=32,
                          streams={"Watch": watch, "Replay": watch}, environment=ENV,
                          transport=transport_of("node", "n1"))
    yield address, served
    server.stop(0)


def test_a_flood_of_silent_streams_does_not_stop_gossip(node, transport_of) -> None:
    address, served = node
    silent = threading.Event()

    def never() -> Iterator[bytes]:
        silent.wait(60)
        yield from ()
    outcomes: list[str] = []
    calls = []
    for i in range(200):  # 25 peers of the environment, 8 streams each
        peer = transport_of("peer", f"flood{i % 25}", ENV)
        client = ReplicaClient(transport=peer)
        call = client._channel(address).stream_stream(method_path("Watch"))(never(), timeout=30)
        calls.append((client, call))

    def drain(call: Any) -> None:
        try:
            for _ in call:
                pass
            outcomes.append("ended")
        except grpc.RpcError as exc:
            outcomes.append(exc.code().name)
    threads = [threading.Thread(target=drain, args=(c,), daemon=True) for _, c in calls]
    for t in threads:
        t.start()
    gossip = ReplicaClient(transport=transport_of("node", "n2"))
    gossip.know({"n1": address})
    rounds = []
    try:
        for _ in range(50):
            t0 = time.monotonic()
            assert gossip.call(address, "Gossip", b"state", timeout=5) == b"state"
            rounds.append(time.monotonic() - t0)
            time.sleep(0.05)
        p99 = statistics.quantiles(rounds, n=100)[98]
        assert p99 < 1.0, f"gossip p99 {p99:.3f}s under the flood"
        wait_for(lambda: len(outcomes) == 200, 30, 0.1, "every flooding stream ended")
        assert set(outcomes) <= {"RESOURCE_EXHAUSTED", "CANCELLED"}
        assert outcomes.count("RESOURCE_EXHAUSTED") > 0 and outcomes.count("CANCELLED") > 0
        assert served == []
        # the threads came back: a well-behaved peer is served
        alice = ReplicaClient(transport=transport_of("peer", "alice", ENV))
        call = alice._channel(address).stream_stream(method_path("Watch"))(
            iter([json.dumps({"peer": "alice"}).encode()]), timeout=5)
        assert [json.loads(m) for m in call] == [{"peer": "alice"}]
        alice.close()
    finally:
        silent.set()
        gossip.close()
        for client, _ in calls:
            client.close()
