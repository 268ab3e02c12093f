"""Direct delivery over gRPC on loopback, and quorum/all waits against fake replica nodes."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import wait_for
from tidemark.gossip.cluster_config import Epoch, Partition
from tidemark.gossip.service import start_server
from tidemark.log.settings import Settings
from tidemark.peer_client import MessageContext, message, message_type_of
from tidemark.peer_client.direct import DirectClient, DirectServer
from tidemark.peer_client.exceptions import DurabilityTimeoutError, PeerUnreachableError
from tidemark.peer_client.records import peer_codec
from tidemark.peer_client.stability import ReplicaStability
from tidemark.peer_client.testing import TestBus

pytestmark = pytest.mark.usefixtures("insecure")  # plaintext: TLS is tests/security

@message("tests.grpc.Note")
@dataclass
class Note:
    text: str


def _batch(sender: str, recipient: str, env: str, n: int) -> bytes:
    return peer_codec().encode("DirectBatch", {
        "sender": sender, "sender_incarnation": "s-1", "recipient": recipient,
        "environment": env, "messages": [
            {"message_id": f"m-{i}", "message_type": "tests.grpc.Note",
             "payload": message_type_of(Note).serializer.encode(Note(f"n{i}")),
             "timestamp_ms": 1, "persistent": True} for i in range(n)]})


def test_deliver_over_loopback_with_receipts_and_refusals() -> None:
    bus = TestBus(auto_run=False)
    b = bus.peer("B")
    seen: list[str] = []

    @b.handler
    def on(msg: Note, ctx: MessageContext) -> None:
        seen.append(msg.text)

    server = DirectServer("127.0.0.1:0", b._core.receive_bytes)
    client = DirectClient(2000)
    try:
        assert server.endpoint.startswith("127.0.0.1:") and server.port > 0
        got: list = []
        event = threading.Event()
        client.deliver(server.endpoint, _batch("A", "B", "test", 3),
                       lambda r, e: (got.append((r, e)), event.set()))
        assert event.wait(10)
        receipt, error = got[0]
        assert error is None and receipt["accepted"] == 3
        assert receipt["incarnation"] == b.incarnation and receipt["error"] == ""
        bus.run_until_idle()
        assert seen == ["n0", "n1", "n2"]
        wrong = client.call(server.endpoint, _batch("P", "B", "prod", 1))
        assert wrong["error_kind"] == "environment" and "'prod'" in wrong["error"]
        other = client.call(server.endpoint, _batch("A", "Z", "test", 1))
        assert other["error_kind"] == "recipient"
        garbage = client.call(server.endpoint, b"not avro")
        assert garbage["error_kind"] == "bad_request"
        ping = client.call(server.endpoint, _batch("B", "B", "test", 0))
        assert ping["incarnation"] == b.incarnation and ping["accepted"] == 0
    finally:
        server.stop()
    with pytest.raises(PeerUnreachableError):
        client.call(server.endpoint, _batch("A", "B", "test", 1), timeout=2)
    errors: list = []
    done = threading.Event()
    client.deliver(server.endpoint, _batch("A", "B", "test", 1),
                   lambda r, e: (errors.append(e), done.set()))
    assert done.wait(10) and isinstance(errors[0], PeerUnreachableError)
    client.close()


class FakeReplica:
    """A replica node streaming the applied and stable ends of partition 0 (``Watch``)
    whenever a test moves them."""

    def __init__(self, port: int) -> None:
        self.applied = self.stable = self.streams = 0
        self.cond = threading.Condition()
        self.stopping = False
        self.server = start_server(f"127.0.0.1:{port}", {}, workers=4,
                                   streams={"Watch": self._watch})

    def _watch(self, requests: Any, context: Any) -> Any:
        next(requests, None)
        self.streams += 1
        sent = None
        while context.is_active() and not self.stopping:
            with self.cond:
                if (self.applied, self.stable) == sent:
                    self.cond.wait(0.2)
                now = (self.applied, self.stable)
            if now != sent:
                sent = now
                yield json.dumps({"ends": {"0": list(now)}}).encode()

    def advance(self, applied: int, stable: int | None = None) -> None:
        with self.cond:
            self.applied = applied
            self.stable = self.stable if stable is None else stable
            self.cond.notify_all()

    def stop(self) -> None:
        self.stopping = True
        self.server.stop(0)


def test_quorum_and_all_are_answered_by_the_replicas() -> None:
    ports = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    replicas = [FakeReplica(port) for port in ports]
    epoch = Epoch(1, None, 1, {"r0": f"127.0.0.1:{ports[0]}", "r1": f"127.0.0.1:{ports[1]}"},
                  (Partition("p0", (0,), ("r0", "r1")),))
    stab = ReplicaStability(Settings(bootstrap="unused:1"), timeout_ms=3000, epoch=lambda: epoch)
    try:
        results: dict[str, BaseException | None] = {}
        stab.wait("quorum", 0, 5, lambda e: results.__setitem__("q5", e))
        stab.wait("quorum", 0, 7, lambda e: results.__setitem__("q7", e))
        stab.wait("all", 0, 5, lambda e: results.__setitem__("a5", e))
        replicas[0].advance(10)
        assert not results  # a majority of 2 is 2, and no stable cut yet
        replicas[1].advance(8, stable=6)
        wait_for(lambda: {"q5", "q7", "a5"} <= set(results), 10, 0.01, "replica answers")
        assert results == {"q5": None, "q7": None, "a5": None}
        stab.wait("quorum", 0, 9, lambda e: results.__setitem__("q9", e))
        wait_for(lambda: "q9" in results, 10, 0.02, "the timeout")
        assert isinstance(results["q9"], DurabilityTimeoutError)
        assert "txlog partition 0" in str(results["q9"])
        assert "1 of 2 replicas (r0, r1) confirmed, 2 needed" in str(results["q9"])
        # all: every replica applied it is enough, before any node's cut says so
        stab.wait("all", 0, 8, lambda e: results.__setitem__("a8", e))
        replicas[1].advance(9)  # applied 10 and 9, stable still 6
        wait_for(lambda: "a8" in results, 10, 0.02, "all from the applied ends")
        assert results["a8"] is None
        # r1 goes away and comes back on its address: the peer's stream reconnects
        replicas[1].stop()
        stab.wait("quorum", 0, 11, lambda e: results.__setitem__("q11", e))
        replicas[1] = FakeReplica(ports[1])
        replicas[0].advance(12)
        replicas[1].advance(12)
        wait_for(lambda: "q11" in results, 10, 0.02, "the answer after a reconnect")
        assert results["q11"] is None
    finally:
        stab.close()
        for r in replicas:
            r.stop()
