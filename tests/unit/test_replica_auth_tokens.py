"""Node-to-node authentication (gossip/service.py): with a cluster secret, gossip, status
and backfill calls must be signed with it; peer-facing calls stay open."""

from __future__ import annotations

import grpc
import pytest

from tidemark.gossip.service import (
    ReplicaClient,
    method_path,
    sign_request,
    start_server,
    verify_request,
)
from tidemark.stack.processes import free_ports

pytestmark = pytest.mark.usefixtures("insecure")  # plaintext: TLS is tests/security

SECRET = "s3cret"


def _echo(body: bytes) -> bytes:
    return b"ok:" + body


@pytest.fixture
def server():  # type: ignore[no-untyped-def]
    address = f"127.0.0.1:{free_ports(1)[0]}"
    srv = start_server(address, {m: _echo for m in ("Gossip", "Status", "Digest", "Fetch",
                                                    "Pin")}, secret=SECRET)
    yield address
    srv.stop(0)


def test_outside_calls_are_refused_and_members_answered(server: str) -> None:
    channel = grpc.insecure_channel(server)
    try:
        for method in ("Gossip", "Status", "Digest", "Fetch"):  # a process outside
            with pytest.raises(grpc.RpcError) as err:
                channel.unary_unary(method_path(method))(b"x", timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert channel.unary_unary(method_path("Pin"))(b"x", timeout=5) == b"ok:x"  # peers
    finally:
        channel.close()
    wrong = ReplicaClient("another cluster")
    with pytest.raises(grpc.RpcError) as err:
        wrong.call(server, "Status", b"")
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    wrong.close()
    member = ReplicaClient(SECRET)
    assert member.call(server, "Gossip", b"state") == b"ok:state"
    member.close()


def test_signatures_bind_method_body_and_time() -> None:
    md = sign_request(SECRET, "Fetch", b"body", now_ms=1_000_000)
    assert verify_request(SECRET, "Fetch", b"body", md, now_ms=1_000_000) is None
    assert verify_request(SECRET, "Fetch", b"other", md, now_ms=1_000_000) is not None
    assert verify_request(SECRET, "Digest", b"body", md, now_ms=1_000_000) is not None
    assert verify_request("x", "Fetch", b"body", md, now_ms=1_000_000) is not None
    assert verify_request(SECRET, "Fetch", b"body", md, now_ms=1_000_000 + 61_000) is not None
    assert verify_request(SECRET, "Fetch", b"body", [], now_ms=1_000_000) is not None
