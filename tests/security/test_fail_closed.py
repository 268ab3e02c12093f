"""Fail closed: without TLS material a replica node, a peer and the CLI refuse to start with
one line; ``--insecure`` / ``TIDEMARK_INSECURE=1`` starts them with a warning."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidemark.gossip.tls import TlsMissingError
from tidemark.log.settings import Settings
from tidemark.peer_client.peer import Peer
from tidemark.stack.replicas import write_cluster_file

_TLS_VARS = ("TIDEMARK_TLS_CA", "TIDEMARK_TLS_CERT", "TIDEMARK_TLS_KEY", "TIDEMARK_TLS_ISSUER",
             "TIDEMARK_INSECURE")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _TLS_VARS}
    env["TIDEMARK_STATE_DIR"] = str(tmp_path / "state")  # no local CA there
    env.update(extra)
    return env


def _tidemark(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidemark", *args], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=_env(tmp_path, **extra))


def test_a_node_without_material_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "cluster.toml"
    write_cluster_file(config, {"bootstrap": "127.0.0.1:1", "topic_prefix": "x.",
                                "partitions": 4}, "1x1", 4, 200)
    out = _tidemark(tmp_path, "replica", "run", "--config", str(config), "--node", "p0r0")
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no TLS material for tidemark:node:p0r0" in lines[0], lines


def test_a_queues_job_without_ca_material_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    """The job checks txlog signatures: without a CA bundle it does not start (and says so
    before it reaches for Kafka)."""
    out = _tidemark(tmp_path, "queues", "run", "--bootstrap", "127.0.0.1:1",
                    "--checkpoint", str(tmp_path / "cp"))
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CA material to check txlog signatures" in lines[0], lines


def test_the_cli_refuses_and_insecure_warns(tmp_path: Path) -> None:
    out = _tidemark(tmp_path, "replica", "status", "--address", "127.0.0.1:1")
    assert out.returncode != 0 and out.stderr.count("\n") == 1
    assert "no TLS material for tidemark:operator:" in out.stderr
    out = _tidemark(tmp_path, "replica", "status", "--address", "127.0.0.1:1", "--timeout",
                    "1", TIDEMARK_INSECURE="1")
    assert "INSECURE: TLS is off" in out.stderr and "no replica node answered" in out.stderr


def test_a_peer_without_material_refuses_to_be_created(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _TLS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(TlsMissingError, match="no TLS material for tidemark:peer:test:solo"):
        Peer("solo", "test", Settings(bootstrap="127.0.0.1:1", environment="test"))
