"""Peer tokens at the gRPC layer (gossip.service) and on pins (replica.leases), over a real
in-process gRPC server: the refusals, their codes and error classes, and that a refused
replay never reaches the handler (nothing streamed, no pin)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support import wait_for
from tidemark.gossip.cluster_config import Epoch, Partition
from tidemark.gossip.exceptions import PeerAuthError, PeerForbiddenError
from tidemark.gossip.peer_auth import (
    TOKEN_KEY,
    check_owner,
    configured_token,
    issue_token,
    local_stack_token,
    serving_as,
    verify_token,
)
from tidemark.gossip.replay import COMPLETE, ERROR_KEY, HEADER, request_peer
from tidemark.gossip.service import ReplicaClient, method_path, sign_request, start_server
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.settings import Settings
from tidemark.peer_client.exceptions import DurabilityUnavailableError
from tidemark.peer_client.stability import ReplicaStability
from tidemark.replica.config import load_cluster_file
from tidemark.replica.leases import Leases
from tidemark.stack.processes import free_ports
from tidemark.stack.replicas import write_cluster_file

SECRET, ENV = "cluster-secret", "test"
pytestmark = pytest.mark.usefixtures("insecure")  # plaintext: TLS is tests/security

PARTITIONS = 12
A_TP = f"txlog/{partition_for_peer('A', PARTITIONS)}"
OTHER_TP = f"txlog/{(partition_for_peer('A', PARTITIONS) + 1) % PARTITIONS}"


class Replica:
    """A server with the real auth wrappers, real leases and a minimal Replay handler."""

    def __init__(self) -> None:
        self.address = f"127.0.0.1:{free_ports(1)[0]}"
        self.leases = Leases(partitions=PARTITIONS)
        self.replays: list[str] = []

        def pin(body: bytes) -> bytes:
            req = json.loads(body)
            lease = self.leases.grant(req["barrier"], {}, None, str(req.get("owner", "")))
            return json.dumps({"pin": lease.pin, "owner": lease.owner}).encode()

        def renew(body: bytes) -> bytes:
            return json.dumps({"renewed": self.leases.renew(json.loads(body)["pin"])
                               is not None}).encode()

        def unpin(body: bytes) -> bytes:
            return json.dumps({"released": self.leases.release(json.loads(body)["pin"])
                               }).encode()

        def replay(requests: Iterator[bytes], context: grpc.ServicerContext
                   ) -> Iterator[bytes]:
            peer = json.loads(next(requests))["peer"]
            self.replays.append(peer)
            lease = self.leases.grant({"txlog/0": 5}, {}, owner=peer)
            yield HEADER + json.dumps({"pin": lease.pin, "barrier": 5, "partition": 0,
                                       "node": "n"}).encode()
            yield COMPLETE + json.dumps({"barrier": 5}).encode()
            for _ in requests:
                pass
        self.server = start_server(self.address, {"Pin": pin, "RenewPin": renew,
                                                  "Unpin": unpin}, streams={"Replay": replay},
                                   secret=SECRET, environment=ENV)


@pytest.fixture
def replica(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Replica]:
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path))  # no local stack to mint from
    monkeypatch.delenv("TIDEMARK_PEER_TOKEN", raising=False)
    monkeypatch.delenv("TIDEMARK_PEER_TOKEN_FILE", raising=False)
    r = Replica()
    yield r
    r.server.stop(0)


def token(peer: str, env: str = ENV, secret: str = SECRET) -> str:
    return issue_token(secret, env, peer)


def raw_replay(address: str, peer: str, metadata: tuple = ()) -> grpc.RpcError:
    channel = grpc.insecure_channel(address)
    try:
        call = channel.stream_stream(method_path("Replay"))
        request = json.dumps({"peer": peer, "environment": ENV}).encode()
        with pytest.raises(grpc.RpcError) as err:
            list(call(iter([request]), metadata=metadata, timeout=10))
        return err.value
    finally:
        channel.close()


def test_refused_replays_never_reach_the_handler(replica: Replica) -> None:
    cases = [((), grpc.StatusCode.UNAUTHENTICATED, "PeerAuthError", "no peer token"),
             (((TOKEN_KEY, "garbage"),), grpc.StatusCode.UNAUTHENTICATED, "PeerAuthError",
              "malformed"),
             (((TOKEN_KEY, token("A", secret="other cluster")),),
              grpc.StatusCode.UNAUTHENTICATED, "PeerAuthError", "bad signature"),
             (((TOKEN_KEY, token("B")),), grpc.StatusCode.PERMISSION_DENIED,
              "PeerForbiddenError", "peer 'B' may not act on the queue of 'A'"),
             (((TOKEN_KEY, token("A", env="prod")),), grpc.StatusCode.PERMISSION_DENIED,
              "PeerForbiddenError", "environment 'prod'")]
    for metadata, code, cls, text in cases:
        err = raw_replay(replica.address, "A", metadata)
        assert err.code() == code, (metadata, err)
        assert text in (err.details() or ""), err.details()
        assert dict(err.trailing_metadata() or ())[ERROR_KEY] == cls
    assert replica.replays == [] and len(replica.leases) == 0


def test_client_maps_refusals_to_errors_and_right_token_replays(replica: Replica) -> None:
    client = ReplicaClient()
    try:
        with pytest.raises(PeerForbiddenError, match="may not act on the queue of 'A'"):
            client.replay(replica.address, "A", ENV, token=token("B"))
        with pytest.raises(PeerAuthError, match="no peer token"):
            client.replay(replica.address, "A", ENV)
        assert replica.replays == []
        stream = client.replay(replica.address, "A", ENV, token=token("A"), auto_renew=False)
        assert list(stream.entries()) == [] and stream.complete == {"barrier": 5}
        assert stream.renew()  # RenewPin with A's token, on A's pin
        stream.close()  # Unpin with A's token
        assert replica.replays == ["A"] and len(replica.leases) == 0
    finally:
        client.close()


def test_pins_belong_to_their_peer(replica: Replica) -> None:
    client, address = ReplicaClient(), replica.address
    try:
        a, b = token("A"), token("B")
        pin = client.call_json(address, "Pin", {"barrier": {A_TP: 3}}, token=a)
        assert pin["owner"] == "A"  # a peer pins for itself
        for barrier in ({OTHER_TP: 3}, {A_TP: 3, OTHER_TP: 3}):  # ... and its partition only
            with pytest.raises(grpc.RpcError) as err:
                client.call_json(address, "Pin", {"barrier": barrier}, token=a)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert f"may pin only its own partition {A_TP}, not {OTHER_TP}" in \
                (err.value.details() or "")
        for name, body in (("RenewPin", {"pin": pin["pin"]}), ("Unpin", {"pin": pin["pin"]}),
                           ("Pin", {"barrier": {A_TP: 1}, "owner": "A"})):
            with pytest.raises(grpc.RpcError) as err:
                client.call_json(address, name, body, token=b)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, name
            assert "may not act on the pin of 'A'" in (err.value.details() or "")
        with pytest.raises(grpc.RpcError) as err:  # neither token nor signature
            client.call_json(address, "RenewPin", {"pin": pin["pin"]})
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as err:
            client.call_json(address, "Unpin", {"pin": pin["pin"]},
                             token=token("A", env="prod"))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert client.call_json(address, "RenewPin", {"pin": pin["pin"]}, token=a)["renewed"]
        assert client.call_json(address, "Unpin", {"pin": pin["pin"]}, token=a)["released"]
        member = ReplicaClient(SECRET)  # a member's signed call may act on any pin
        other = member.call_json(address, "Pin", {"barrier": {"txlog/0": 2}, "owner": "B"})
        assert other["owner"] == "B"
        assert member.call_json(address, "Unpin", {"pin": other["pin"]})["released"]
        member.close()
    finally:
        client.close()


def test_member_signature_binds_the_body(replica: Replica) -> None:
    channel = grpc.insecure_channel(replica.address)
    try:
        body = json.dumps({"barrier": {"txlog/0": 1}}).encode()
        md = sign_request(SECRET, "Pin", b"another body")
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(method_path("Pin"))(body, metadata=md, timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()


def test_check_owner_outside_and_inside_a_peer_call() -> None:
    assert check_owner("B", "Pin") == "B"  # the node's own work: unrestricted
    claims = verify_token(SECRET, token("A"))
    with serving_as(claims):
        assert check_owner("", "Pin", new=True) == "A"
        assert check_owner("A", "RenewPin") == "A"
        for owner in ("B", ""):
            with pytest.raises(PeerForbiddenError):
                check_owner(owner, "RenewPin")
    assert check_owner("B", "Unpin") == "B"


def test_watch_needs_a_token_of_the_environment() -> None:
    """The durability stream (``Watch``) is served to any peer token of the environment;
    none, a forged one or another environment's ends the stream before anything is sent,
    and ReplicaStability fails the waits with the refusal instead of timing out."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    served: list[int] = []

    def watch(requests: Any, context: Any) -> Any:
        served.append(1)
        yield json.dumps({"ends": {"0": [9, 9]}}).encode()
    server = start_server(address, {}, streams={"Watch": watch}, secret=SECRET,
                          environment=ENV)
    client = ReplicaClient()
    try:
        first = next(iter(client.watch(address, token=token("anyone"))))
        assert json.loads(first)["ends"] == {"0": [9, 9]} and served == [1]
        for tok, code in ((None, grpc.StatusCode.UNAUTHENTICATED),
                          (token("A", secret="forged"), grpc.StatusCode.UNAUTHENTICATED),
                          (token("A", env="prod"), grpc.StatusCode.PERMISSION_DENIED)):
            with pytest.raises(grpc.RpcError) as err:
                next(iter(client.watch(address, token=tok)))
            assert err.value.code() == code
        assert served == [1]  # the refused streams never reached the handler
        epoch = Epoch(1, None, 1, {"r0": address}, (Partition("p0", (0,), ("r0",)),))
        stab = ReplicaStability(Settings(bootstrap="unused:1"), timeout_ms=20_000,
                                epoch=lambda: epoch, token=token("A", env="prod"))
        got: list[BaseException | None] = []
        try:
            stab.wait("all", 0, 5, got.append)
            wait_for(lambda: got, 10, 0.02, "the refusal")
        finally:
            stab.close()
        assert isinstance(got[0], DurabilityUnavailableError)
        assert "Watch on r0 refused" in str(got[0]) and "prod" in str(got[0])
    finally:
        server.stop(0)
        client.close()


def test_request_peer_reads_what_the_replica_reads() -> None:
    assert request_peer(b'{"peer": "A", "environment": "x"}') == "A"
    assert request_peer(b'{"peer": 12}') == "12"  # the replica's str(request["peer"])
    for bad in (None, b"", b"[1]", b'"A"', b"{", b'{"environment": "x"}'):
        assert request_peer(bad) is None


def test_token_settings_and_local_stack(tmp_path: Path) -> None:
    assert configured_token({}) is None
    assert configured_token({"TIDEMARK_PEER_TOKEN": " t1 \n"}) == "t1"
    (tmp_path / "tok").write_text("t2\n")
    assert configured_token({"TIDEMARK_PEER_TOKEN_FILE": str(tmp_path / "tok")}) == "t2"
    with pytest.raises(PeerAuthError, match="TIDEMARK_PEER_TOKEN_FILE"):
        configured_token({"TIDEMARK_PEER_TOKEN_FILE": str(tmp_path / "missing")})
    assert local_stack_token("A", ENV, tmp_path) is None
    (tmp_path / "cluster.toml").write_text('[cluster]\nsecret = "s"\n')
    minted = local_stack_token("A", ENV, tmp_path)
    assert minted is not None and verify_token("s", minted).peer == "A"


def test_peer_token_command(tmp_path: Path) -> None:
    cluster = write_cluster_file(tmp_path / "cluster.toml", {"bootstrap": "127.0.0.1:1",
                                                             "partitions": 4}, "1x1", 4)
    secret = load_cluster_file(cluster).secret
    env = {**os.environ, "TIDEMARK_STATE_DIR": str(tmp_path)}  # the local stack's file
    out = subprocess.run([sys.executable, "-m", "tidemark", "peer", "token", "ada",
                          "--environment", "prod", "--ttl", "1h", "--write",
                          str(tmp_path / "ada.token")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    claims = verify_token(secret, out.stdout.strip())
    assert (claims.environment, claims.peer) == ("prod", "ada")
    assert 3_590_000 < claims.expires_ms - claims.issued_ms <= 3_600_000
    assert (tmp_path / "ada.token").read_text().strip() == out.stdout.strip()
    assert (tmp_path / "ada.token").stat().st_mode & 0o077 == 0
    cluster.write_text(cluster.read_text().replace("secret =", "# secret ="))
    out = subprocess.run([sys.executable, "-m", "tidemark", "peer", "token", "ada"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "has no [cluster] secret" in out.stderr


def test_durability_waits_need_a_token_of_the_environment(replica: Replica) -> None:
    """WaitApplied/WaitStable read no queue: any peer of the environment may wait, a member's
    signed call too; no token, a forged one or another environment's is refused."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    server = start_server(address, {
        "WaitStable": lambda body: json.dumps({"reached": True, "stable_end": 8}).encode()},
        secret=SECRET, environment=ENV)
    client = ReplicaClient()
    body = json.dumps({"partition": 0, "offset": 5, "timeout_ms": 1000}).encode()
    try:
        assert json.loads(client.call(address, "WaitStable", body, token=token("anyone")))["reached"]
        member = ReplicaClient(SECRET)
        assert json.loads(member.call(address, "WaitStable", body))["reached"]
        member.close()
        for tok, code in ((None, grpc.StatusCode.UNAUTHENTICATED),
                          (token("A", secret="forged"), grpc.StatusCode.UNAUTHENTICATED),
                          (token("A", env="prod"), grpc.StatusCode.PERMISSION_DENIED)):
            with pytest.raises(grpc.RpcError) as err:
                client.call(address, "WaitStable", body, token=tok)
            assert err.value.code() == code
    finally:
        server.stop(0)
        client.close()
