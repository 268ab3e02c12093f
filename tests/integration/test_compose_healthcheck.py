"""The compose file's replica healthcheck against a real secured node: pki-init's script
(taken from docker-compose.yml) makes the CA and the nodes' certificates, a real replica node
runs with the compose service's TLS environment (and a cluster secret in its cluster file),
and exactly the service's healthcheck command exits 0; once the node stopped it exits
non-zero with one `tidemark: error:` line. Paths inside the containers (/pki, /tls, the
cluster file) are mapped to this test's folders, the node's address to a free local port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml

from tests import cluster
from tests.support import wait_for
from tidemark.log.topics import delete_topic_set, ensure_topics
from tidemark.stack.replicas import write_cluster_file

pytestmark = [pytest.mark.integration, pytest.mark.ops]

ROOT = Path(__file__).resolve().parents[2]
NODE = "p0r0"
BIN = Path(sys.executable).parent


def _container_env(env: dict[str, str], tls: Path, config: Path) -> dict[str, str]:
    """The compose service's environment with its container paths mapped to the test's."""
    out = {}
    for key, value in env.items():
        value = str(value).replace("/tls/", f"{tls}/")
        out[key] = str(config) if value == "/etc/tidemark/cluster.toml" else value
    return out


def _base_env() -> dict[str, str]:
    """This process's environment without the session's CA: the compose identity only."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_TLS_")
            and k != "TIDEMARK_INSECURE"} | {"PATH": f"{BIN}:{os.environ.get('PATH', '')}"}


def test_compose_healthcheck_passes_on_a_secured_node_and_fails_once_it_stops(
        bootstrap: str, tmp_path: Path) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    # pki-init, as compose runs it (`$$` is compose's escape of `$`), on a folder of ours
    script = services["pki-init"]["command"][0].replace("$$", "$").replace("/pki", str(tmp_path / "pki"))
    assert services["pki-init"]["entrypoint"] == ["sh", "-c"]
    subprocess.run(["sh", "-c", script], env=_base_env(), check=True, timeout=120)

    prefix = f"hc{uuid.uuid4().hex[:8]}."
    settings = cluster.settings(bootstrap=bootstrap, topic_prefix=prefix, partitions=4)
    ensure_topics(settings)
    config = write_cluster_file(tmp_path / "cluster.toml",
                                {"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": 4},
                                "1x1", 4)
    cf = tomllib.loads(config.read_text())
    assert cf["cluster"]["secret"]  # a secured node: mutual TLS and a cluster secret
    address = cf["nodes"][NODE]["address"]

    svc = services[NODE]
    env = _base_env() | _container_env(svc["environment"], tmp_path / "pki" / NODE, config)
    assert env["TIDEMARK_TLS_CERT"] == str(tmp_path / "pki" / NODE / f"node-{NODE}.crt")
    check = svc["healthcheck"]["test"]
    assert check[0] == "CMD"
    argv = [a.replace(f"{NODE}:7100", address) for a in check[1:]]
    assert argv[0] == "tidemark" and address in argv
    argv[0] = str(BIN / "tidemark")

    def healthcheck() -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)

    command = [str(config) if a == "/etc/tidemark/cluster.toml" else a for a in svc["command"]]
    node = subprocess.Popen([str(BIN / "tidemark"), *command], env=env, cwd=tmp_path,
                            stdout=(tmp_path / "node.log").open("w"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: healthcheck().returncode == 0 or node.poll() is not None, 90,
                 what="the compose healthcheck to pass")
        assert node.poll() is None, (tmp_path / "node.log").read_text()[-2000:]
        ok = healthcheck()
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.strip() == f"{address} ({NODE}): SERVING"
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(10)
        delete_topic_set(settings)
    time.sleep(0.5)
    down = healthcheck()
    assert down.returncode != 0
    lines = down.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tidemark: error: "), down.stderr
    assert "UNAVAILABLE" in lines[0]
