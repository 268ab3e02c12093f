"""Mutual TLS on a real gRPC replica server (gossip.service): who may call what is decided from
the caller's certificate only; plaintext, unknown-CA, revoked and wrong-kind callers are refused
before the handler runs; a client reaching a given node refuses an impostor server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tidemark.gossip.access import admit
from tidemark.gossip.exceptions import PeerAuthError, PeerForbiddenError
from tidemark.gossip.peer_auth import serving_peer
from tidemark.gossip.pki import Identity, PkiError, init_ca, issue, revoke
from tidemark.gossip.service import ReplicaClient, serving_identity, start_server
from tidemark.gossip.tls import TlsMissingError, Transport, resolve_transport
from tidemark.stack.processes import free_ports

ENV = "prod"


@pytest.fixture
def node_server(transport_of: Callable[..., Transport]) -> Iterator[tuple[str, list]]:
    """A replica service of node n1 (environment prod) over TLS; ``calls`` records who each
    handler ran for."""
    calls: list = []

    def record(name: str) -> Callable[[bytes], bytes]:
        def fn(body: bytes) -> bytes:
            caller, peer = serving_identity(), serving_peer()
            calls.append((name, caller.uri if caller else None, peer.peer if peer else None))
            return json.dumps({"ok": name}).encode()
        return fn
    address = f"127.0.0.1:{free_ports(1)[0]}"
    server = start_server(address, {n: record(n) for n in ("Gossip", "Status", "Pin")},
                          environment=ENV, transport=transport_of("node", "n1"))
    yield address, calls
    server.stop(0)


def _call(transport: Transport | None, address: str, name: str) -> bytes:
    client = ReplicaClient(transport=transport)
    try:
        return client.call(address, name, b"{}", timeout=5)
    finally:
        client.close()


def test_admit_decides_from_the_certificate_only() -> None:
    peer = Identity("peer", "alice", ENV)
    assert admit("Replay", peer, ENV).peer == "alice"
    assert admit("Gossip", Identity("node", "n2"), ENV) is None
    assert admit("Status", Identity("operator", "ops"), ENV) is None
    with pytest.raises(PeerForbiddenError):
        admit("Gossip", peer, ENV)
    assert admit("Fetch", Identity("operator", "ops"), ENV) is None
    with pytest.raises(PeerForbiddenError):
        admit("Fetch", peer, ENV)
    with pytest.raises(PeerForbiddenError):
        admit("Replay", Identity("peer", "alice", "staging"), ENV)
    with pytest.raises(PeerForbiddenError):
        admit("Replay", peer, "")  # no environment: no peer is admitted (fails closed)
    with pytest.raises(PeerForbiddenError):
        admit("Status", peer, ENV)
    with pytest.raises(PeerAuthError):
        admit("Status", None, ENV)


def test_a_node_calls_gossip_and_the_handler_knows_who(node_server, transport_of) -> None:
    address, calls = node_server
    assert json.loads(_call(transport_of("node", "n2"), address, "Gossip")) == {"ok": "Gossip"}
    assert calls == [("Gossip", "tidemark:node:n2", None)]


def test_a_peer_acts_as_itself_and_may_not_gossip(node_server, transport_of) -> None:
    address, calls = node_server
    alice = transport_of("peer", "alice", ENV)
    _call(alice, address, "Pin")
    assert calls == [("Pin", "tidemark:peer:prod:alice", "alice")]
    with pytest.raises(grpc.RpcError) as err:
        _call(alice, address, "Gossip")
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as err:
        _call(transport_of("peer", "mallory", "staging"), address, "Pin")
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert len(calls) == 1  # refused calls never reached a handler


def test_plaintext_and_foreign_ca_callers_never_reach_a_handler(node_server, tmp_path) -> None:
    address, calls = node_server
    with pytest.raises(grpc.RpcError) as err:
        _call(None, address, "Status")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # no TLS handshake at all
    other = tmp_path / "other-ca"
    init_ca(other)
    files = issue(other, Identity("node", "n1"), tmp_path / "o")
    with pytest.raises(grpc.RpcError) as err:
        _call(Transport(Identity("node", "n1"), files), address, "Gossip")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert calls == []


def test_a_revoked_certificate_is_refused_from_the_next_call(transport_of, ca_dir) -> None:
    calls: list = []
    address = f"127.0.0.1:{free_ports(1)[0]}"
    server = start_server(address, {"Status": lambda b: calls.append(b) or b"{}"},
                          environment=ENV, transport=transport_of("node", "n1"))
    try:
        ops = transport_of("operator", "eve")
        _call(ops, address, "Status")
        assert ops.files is not None
        from cryptography import x509
        serial = x509.load_pem_x509_certificate(ops.files.cert.read_bytes()).serial_number
        revoke(ca_dir, serial)
        with pytest.raises(grpc.RpcError) as err:
            _call(ops, address, "Status")
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert len(calls) == 1
    finally:
        server.stop(0)


def test_a_client_expecting_a_node_refuses_an_impostor(node_server, transport_of) -> None:
    address, calls = node_server  # served by n1
    client = ReplicaClient(transport=transport_of("node", "n2"))
    try:
        client.know({"n3": address})  # n2 believes n3 answers there: n1 cannot pass for n3
        with pytest.raises(grpc.RpcError) as err:
            client.call(address, "Gossip", b"{}", timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        client.know({"n1": address})
        client.call(address, "Gossip", b"{}", timeout=5)
    finally:
        client.close()
    assert [c[1] for c in calls] == ["tidemark:node:n2"]


def test_no_material_refuses_to_start_unless_insecure(tmp_path: Path, monkeypatch,
                                                       caplog) -> None:
    for name in ("TIDEMARK_TLS_CA", "TIDEMARK_TLS_CERT", "TIDEMARK_TLS_KEY", "TIDEMARK_INSECURE",
                 "TIDEMARK_TLS_ISSUER"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(TlsMissingError, match="no TLS material for tidemark:node:n1"):
        resolve_transport(Identity("node", "n1"), state_dir=tmp_path)
    monkeypatch.setenv("TIDEMARK_TLS_CERT", str(tmp_path / "x.crt"))
    with pytest.raises(TlsMissingError, match="go together"):
        resolve_transport(Identity("node", "n1"), state_dir=tmp_path)
    monkeypatch.delenv("TIDEMARK_TLS_CERT")
    monkeypatch.setenv("TIDEMARK_INSECURE", "1")
    with caplog.at_level("WARNING", logger="tidemark.tls"):
        transport = resolve_transport(Identity("node", "n1"), state_dir=tmp_path)
    assert not transport.secure
    assert "INSECURE" in caplog.text


def test_the_local_ca_issues_each_process_its_own_identity(tmp_path: Path, monkeypatch) -> None:
    for name in ("TIDEMARK_TLS_CA", "TIDEMARK_TLS_CERT", "TIDEMARK_TLS_KEY", "TIDEMARK_INSECURE",
                 "TIDEMARK_TLS_ISSUER"):
        monkeypatch.delenv(name, raising=False)
    init_ca(tmp_path / "pki")
    t = resolve_transport(Identity("peer", "alice", ENV), state_dir=tmp_path)
    assert t.secure and t.files is not None
    assert oct(t.files.key.stat().st_mode & 0o777) == "0o600"
    from tidemark.gossip.pki import identity_of_pem
    assert identity_of_pem(t.files.cert.read_bytes())[0] == Identity("peer", "alice", ENV)
    with pytest.raises(PkiError):
        Identity("peer", "alice")  # a peer names its environment
