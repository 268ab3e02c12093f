"""grpc.health.v1.Health on a replica server over mutual TLS (gossip.health): SERVING once
set, NOT_SERVING once stopping (and final); any holder of a certificate of the cluster's CA
may probe (operator, node, peer); a revoked certificate is refused (UNAUTHENTICATED), a
certificate of another CA fails the handshake, and the probe refuses a server that is not
the node it names."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tidemark.gossip.exceptions import NodeUnreachableError
from tidemark.gossip.health import health_servicer, probe, set_serving
from tidemark.gossip.pki import Identity, init_ca, issue, revoke
from tidemark.gossip.service import start_server
from tidemark.gossip.tls import Transport
from tidemark.stack.processes import free_ports


@pytest.fixture
def node(transport_of: Callable[..., Transport]) -> Iterator[tuple[str, object]]:
    """Node n1's server (a Status handler and the health service) over TLS."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    transport = transport_of("node", "n1")
    health = health_servicer(transport)
    server = start_server(address, {"Status": lambda b: json.dumps({}).encode()},
                          environment="prod", transport=transport, health=health)
    yield address, health
    server.stop(0)


def test_serving_then_not_serving(node: tuple[str, object],
                                  transport_of: Callable[..., Transport]) -> None:
    address, health = node
    operator = transport_of("operator", "ops")
    assert probe(address, operator, timeout=5) == "NOT_SERVING"  # until the node serves
    set_serving(health, True)
    assert probe(address, operator, timeout=5) == "SERVING"
    assert probe(address, operator, timeout=5, service="tidemark.Replica") == "SERVING"
    assert probe(address, transport_of("node", "n2"), timeout=5, node="n1") == "SERVING"
    assert probe(address, transport_of("peer", "alice", "prod"), timeout=5) == "SERVING"
    set_serving(health, False)
    assert probe(address, operator, timeout=5) == "NOT_SERVING"
    set_serving(health, True)  # stopping is final
    assert probe(address, operator, timeout=5) == "NOT_SERVING"


def test_probe_checks_who_answers(node: tuple[str, object],
                                  transport_of: Callable[..., Transport]) -> None:
    address, health = node
    set_serving(health, True)
    with pytest.raises(NodeUnreachableError, match="UNAVAILABLE"):
        probe(address, transport_of("operator", "ops"), timeout=3, node="n2")  # an impostor


def test_other_ca_and_revoked_callers_are_refused(
        node: tuple[str, object], ca_dir: Path, tmp_path: Path,
        transport_of: Callable[..., Transport]) -> None:
    address, health = node
    set_serving(health, True)
    other = tmp_path / "other-ca"
    init_ca(other)
    stranger = issue(other, Identity("operator", "ops"), tmp_path / "issued", stem="stranger")
    with pytest.raises(NodeUnreachableError, match="UNAVAILABLE"):
        probe(address, Transport(Identity("operator", "ops"), stranger), timeout=3)
    revoked = transport_of("operator", "gone")
    serial = x509.load_pem_x509_certificate(revoked.files.cert.read_bytes()).serial_number
    revoke(ca_dir, serial)
    with pytest.raises(NodeUnreachableError, match="UNAUTHENTICATED"):
        probe(address, revoked, timeout=5)
