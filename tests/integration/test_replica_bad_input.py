"""Bad input through the real CLI: a corrupt LevelDB folder and bad configs each give one
clear error line and a non-zero exit (never a traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import cluster
from tidemark.replica.config import NodeSpec, PartitionSpec, render_cluster_file
from tidemark.replica.store import Store

pytestmark = pytest.mark.integration


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tidemark", *args], capture_output=True,
                          text=True, timeout=60)


def _one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tidemark: error: "), lines[0]
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _config(tmp_path: Path, bootstrap: str = "127.0.0.1:1") -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(render_cluster_file(
        {"bootstrap": bootstrap, "topic_prefix": "h3bad.", "partitions": 2}, "data",
        [PartitionSpec("p0", (0, 1), ("p0r0",))], [NodeSpec("p0r0", "127.0.0.1:1", 0)]))
    return path


def test_corrupt_leveldb_folder(tmp_path: Path) -> None:
    path = _config(tmp_path)
    store = Store(tmp_path / "data" / "p0r0", "p0r0")
    store.db.put(b"x", b"y")
    store.close()
    for f in (tmp_path / "data" / "p0r0").glob("MANIFEST-*"):
        f.write_bytes(b"\x00garbage" * 64)
    _one_error_line(_cli("replica", "run", "--config", str(path), "--node", "p0r0"),
                    "corrupt", str(tmp_path / "data" / "p0r0"))


def test_store_of_another_node(tmp_path: Path) -> None:
    path = _config(tmp_path)
    Store(tmp_path / "data" / "p0r0", "someone-else").close()
    _one_error_line(_cli("replica", "run", "--config", str(path), "--node", "p0r0"),
                    "belongs to node 'someone-else'")


@pytest.mark.parametrize("text,needle", [
    ("[cluster\n", "not valid TOML"),
    ("[kafka]\nbootstrap='x:1'\n[cluster]\n[[cluster.partitions]]\nreplicas=['a']\n", "nodes"),
    ("[kafka]\nbootstrap='x:1'\npartitions=2\n[cluster]\n[[cluster.partitions]]\n"
     "replicas=['a']\nlog_partitions=[0]\n[nodes.a]\naddress='127.0.0.1:5'\n", "cover"),
    ("[kafka]\nbootstrap='x:1'\n[cluster]\n[[cluster.partitions]]\nreplicas=['a']\n"
     "[nodes.a]\naddress='nowhere'\n", "HOST:PORT"),
    ("[kafka]\nbootstrap='x:1'\nbogus=1\n[cluster]\n", "unknown key kafka.bogus"),
])
def test_bad_config(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    _one_error_line(_cli("replica", "run", "--config", str(path), "--node", "a"), needle)


def test_missing_config_and_unreachable_status(tmp_path: Path) -> None:
    _one_error_line(_cli("replica", "run", "--config", str(tmp_path / "nope.toml"), "--node",
                         "a"), "does not exist")
    _one_error_line(_cli("replica", "status", "--address", "127.0.0.1:1", "--timeout", "1"),
                    "no replica node answered")


def test_node_not_in_config(bootstrap: str, tmp_path: Path) -> None:
    import uuid
    path = tmp_path / "cluster.toml"
    path.write_text(render_cluster_file(
        {"bootstrap": bootstrap, "topic_prefix": f"h3bad{uuid.uuid4().hex[:6]}.",
         "partitions": 2}, "data", [PartitionSpec("p0", (0, 1), ("p0r0",))],
        [NodeSpec("p0r0", "127.0.0.1:1", 0)]))
    from tidemark.log.settings import load_settings
    from tidemark.log.topics import delete_topic_set, ensure_topics
    settings = load_settings(path, env=cluster.client_env())
    ensure_topics(settings)
    try:
        _one_error_line(_cli("replica", "run", "--config", str(path), "--node", "zz"),
                        "node 'zz' is not in")
    finally:
        delete_topic_set(settings)
