"""``tidemark bench send``, ``bench stable`` and ``bench replay`` measure the secure side
(mutual TLS) beside ``--insecure`` in the same run, with very small parameters (a check of
the fields, not a measurement): both sides measured something, and the replica nodes, which
the comparison restarts serving plaintext, serve mutual TLS again at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.replicas import replica_stack
from tidemark.stack.launcher import LocalStack
from tidemark.stack.replicas import serve_tls

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300), pytest.mark.load]


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with replica_stack(bootstrap, tmp_path_factory.mktemp("security") / "stack", "2x2") as s:
        yield s


def _bench(stack: LocalStack, *args: str) -> dict[str, Any]:
    env = {**os.environ, "TIDEMARK_STATE_DIR": str(stack.state_dir)}
    proc = subprocess.run([sys.executable, "-m", "tidemark", "bench", *args, "--json"],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout))


def _compared(r: dict[str, Any]) -> dict[str, Any]:
    sec = r["security"]
    assert sec["compared"] is True, sec
    assert sec["secure"] > 0 and sec["insecure"] > 0, sec
    assert r["security_ratio"] is not None and r["security_ratio"] > 0
    assert r["security_target_ratio"] == 0.9
    assert r["security_met"] == (r["security_ratio"] >= 0.9)
    return dict(sec)


def test_bench_send_compares_a_secure_and_an_insecure_peer(stack: LocalStack) -> None:
    r = _bench(stack, "send", "--messages", "500", "--rounds", "1")
    sec = _compared(r)
    assert r["peer_msgs_per_s"] == sec["secure"] and len(sec["insecure_rounds"]) == 1


def test_bench_stable_and_replay_restart_the_nodes_and_back(stack: LocalStack) -> None:
    r = _bench(stack, "stable", "--rate", "100", "--seconds", "1", "--warm-up", "1",
               "--security-pairs", "1")
    sec = _compared(r)
    assert r["stable_p99_ms"] == sec["secure"] and len(sec["restarts_s"]) == 1
    assert all(serve_tls(stack).values()), "the nodes did not come back on mutual TLS"

    r = _bench(stack, "replay", "--messages", "600", "--security-messages", "600",
               "--batch", "100", "--window", "100", "--security-pairs", "1",
               "--settle", "0", "--timeout", "60")
    sec = _compared(r)
    assert sec["messages"] == 600 and len(sec["secure_rounds"]) == 1
    assert r["peer_handled"] == 600
    tls = serve_tls(stack)
    assert tls and all(tls.values()), f"the nodes did not come back on mutual TLS: {tls}"
    assert not any("TIDEMARK_INSECURE" in s.env for s in LocalStack(stack.state_dir)
                   .processes("replica"))
