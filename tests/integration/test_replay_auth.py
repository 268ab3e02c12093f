"""Peer credentials (issue 10 item 5) on a real replica node process, real Kafka, LevelDB and
gRPC between processes: each peer runs in its own process, without the cluster file, with
only its token (``TIDEMARK_PEER_TOKEN``). Peer A cannot replay B's queue, nor renew or drop
B's pin; a peer of another environment is refused; a missing or forged token is refused;
each with one clear error and nothing streamed; A's own token replays A's queue; the peer
library turns a refusal into :class:`~tidemark.peer_client.exceptions.ReplayDeniedError`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_replay_service import Queues

from tests.replicas import current_epoch, replica_stack, status
from tidemark.gossip.peer_auth import issue_token
from tidemark.gossip.service import ReplicaClient
from tidemark.log.partitioner import partition_for_peer
from tidemark.stack.launcher import LocalStack
from tidemark.stack.replicas import peer_env

pytestmark = pytest.mark.integration
ENV = "default"

PEER = """
import json, os, sys
import grpc
from tidemark.gossip.exceptions import ReplayError
from tidemark.gossip.service import ReplicaClient
from tidemark.peer_client.exceptions import PeerClientError
mode, address, target, env = sys.argv[1:5]
client = ReplicaClient()
try:
    if mode == "replay":
        stream = client.replay(address, target, env, barrier_timeout_ms=60000)
        n = 0
        for entry in stream.entries():
            n += 1
            stream.ack()
        stream.close()
        out = {"ok": True, "entries": n, "peer": stream.header["peer"]}
    elif mode in ("RenewPin", "Unpin"):
        reply = client.call_json(address, mode, {"pin": target},
                                 token=os.environ.get("TIDEMARK_PEER_TOKEN"))
        out = {"ok": True, "reply": reply}
    else:  # the peer library: a Peer with a ReplicaReplayer, starting as `target`
        from tidemark.log.settings import load_settings
        from tidemark.peer_client import Peer
        from tidemark.peer_client.replay import ReplicaReplayer
        settings = load_settings()
        Peer(target, None, settings, replayer=ReplicaReplayer(settings)).start()
        out = {"ok": True}
except ReplayError as exc:
    out = {"ok": False, "error": type(exc).__name__, "code": exc.status, "message": str(exc)}
except PeerClientError as exc:
    out = {"ok": False, "error": type(exc).__name__, "code": getattr(exc, "code", ""),
           "message": str(exc)}
except grpc.RpcError as exc:
    out = {"ok": False, "error": "RpcError", "code": exc.code().name, "message": exc.details()}
client.close()
print(json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A node started insecure: this module tests the peer tokens, which are what an
    insecure node checks (over mutual TLS the certificate decides: tests/security)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIDEMARK_INSECURE", "1")  # the node, this process and the peer scripts
        with replica_stack(bootstrap, tmp_path_factory.mktemp("auth") / "stack", "1x1") as s:
            yield s


def peer_process(stack: LocalStack, tmp: Path, mode: str, target: str,
                 token: str | None, env: str = ENV) -> dict[str, Any]:
    """Run the peer script in its own process (no cluster file, its own state folder)."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TIDEMARK_PEER_TOKEN", "TIDEMARK_PEER_TOKEN_FILE")}
    environ["TIDEMARK_STATE_DIR"] = str(tmp)  # no local stack to take a token from
    if token is not None:
        environ["TIDEMARK_PEER_TOKEN"] = token
    node = current_epoch(stack.settings()).nodes["p0r0"]
    out = subprocess.run([sys.executable, "-c", PEER, mode, node, target, env], env=environ,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def pins(stack: LocalStack) -> list[dict[str, Any]]:
    return list((status(stack, "p0r0") or {}).get("pins", []))


def test_peers_replay_and_pin_only_their_own_queue(stack: LocalStack, tmp_path: Path) -> None:
    q = Queues(stack.settings())
    want = {"ada": 30, "bob": 20}
    for peer, n in want.items():
        for mid, off in q.sends(peer, n):
            q.upsert(peer, mid, off)
    for k in {partition_for_peer(p, 4) for p in want}:
        q.progress(k)
    token_a = peer_env(stack, "ada", ENV)["TIDEMARK_PEER_TOKEN"]
    assert token_a != peer_env(stack, "bob", ENV)["TIDEMARK_PEER_TOKEN"]

    # the right token works: A replays exactly its own queue
    own = peer_process(stack, tmp_path, "replay", "ada", token_a)
    assert own == {"ok": True, "entries": 30, "peer": "ada"}, own

    # B's replay, held open by a member (this process loaded the cluster file): B's pin
    member = ReplicaClient()
    b_stream = member.replay(current_epoch(stack.settings()).nodes["p0r0"], "bob", ENV,
                             barrier_timeout_ms=60_000)
    try:
        b_pin = b_stream.pin
        before = pins(stack)
        assert [p["owner"] for p in before] == ["bob"], before

        refused = peer_process(stack, tmp_path, "replay", "bob", token_a)
        assert refused["error"] == "PeerForbiddenError", refused
        assert refused["code"] == "PERMISSION_DENIED"
        assert "peer 'ada' may not act on the queue of 'bob'" in refused["message"]
        for method in ("RenewPin", "Unpin"):  # acks and renewals of B's replay
            out = peer_process(stack, tmp_path, method, b_pin, token_a)
            assert out["code"] == "PERMISSION_DENIED", out
            assert "peer 'ada' may not act on the pin of 'bob'" in out["message"], out

        missing = peer_process(stack, tmp_path, "replay", "ada", None)
        assert missing["error"] == "PeerAuthError" and missing["code"] == "UNAUTHENTICATED"
        assert "no peer token" in missing["message"], missing
        forged = peer_process(stack, tmp_path, "replay", "ada",
                              issue_token("not this cluster's", ENV, "ada"))
        assert forged["error"] == "PeerAuthError", forged
        assert "bad signature" in forged["message"], forged

        prod = peer_env(stack, "ada", "prod")["TIDEMARK_PEER_TOKEN"]
        for env in ("prod", ENV):  # a peer of environment prod, whatever it asks for
            other = peer_process(stack, tmp_path, "replay", "ada", prod, env)
            assert other["error"] == "PeerForbiddenError", other
            assert ("the token of 'ada' is for environment 'prod', this cluster serves "
                    "'default'") in other["message"], other

        # the peer library: a clear exception, and the peer does not start
        lib = peer_process(stack, tmp_path, "peer", "bob", token_a)
        assert lib["error"] == "ReplayDeniedError" and lib["code"] == "PERMISSION_DENIED"
        assert "replay of bob (default) refused" in lib["message"], lib
        lib = peer_process(stack, tmp_path, "peer", "ada", None)
        assert lib["error"] == "ReplayDeniedError" and lib["code"] == "UNAUTHENTICATED", lib

        # nothing was streamed or pinned for a refused call; B's pin untouched and renewed
        after = pins(stack)
        assert [(p["pin"], p["owner"]) for p in after] == [(b_pin, "bob")], after
        assert list(b_stream.entries()) and b_stream.complete is not None
        assert b_stream.received == 20
    finally:
        b_stream.close()
        member.close()
    assert pins(stack) == []
