"""deploy/: spark-submit.sh (syntax; --dry-run prints the command with the connector's Maven
coordinates from the shipped pom), init-secrets.sh (creates the secrets once, keeps them on a
second run), and the systemd unit of a replica node (systemd-analyze verify when available,
else its required keys)."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tidemark.log.jvm import pom_dir

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd" / "tidemark-replica@.service"


@pytest.mark.parametrize("script", ["spark-submit.sh", "init-secrets.sh"])
def test_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", str(DEPLOY / script)], check=True, timeout=30)


def _connector() -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(pom_dir() / "spark" / "pom.xml").getroot()
    version = root.find("m:properties/m:spark.version", ns).text
    dep = root.find("m:dependencies/m:dependency", ns)
    return f"{dep.find('m:groupId', ns).text}:{dep.find('m:artifactId', ns).text}:{version}"


def test_spark_submit_dry_run_prints_the_command(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(DEPLOY / "spark-submit.sh"), "--dry-run", "--master", "spark://m:7077",
         "--deploy-mode", "cluster", "--config", "/etc/t/cluster.toml", "--checkpoint",
         "s3a://b/ckpt", "--", "--supervise"],
        capture_output=True, text=True, timeout=60, check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)})
    argv = shlex.split(proc.stdout)
    assert argv[0] == "spark-submit"
    assert argv[argv.index("--master") + 1] == "spark://m:7077"
    assert argv[argv.index("--deploy-mode") + 1] == "cluster"
    assert argv[argv.index("--packages") + 1] == _connector() == \
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"
    assert "spark.python.daemon.module=tidemark.spark_streaming.pydaemon" in argv
    assert "--supervise" in argv
    entry = argv.index("queues") - 1
    assert argv[entry].endswith("tidemark/__main__.py") and Path(argv[entry]).is_file()
    assert argv[entry + 1:] == ["queues", "run", "--config", "/etc/t/cluster.toml",
                                "--checkpoint", "s3a://b/ckpt", "--trigger", "500ms"]
    bad = subprocess.run(["bash", str(DEPLOY / "spark-submit.sh"), "--bogus"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown argument" in bad.stderr


def test_init_secrets_creates_once(tmp_path: Path) -> None:
    out = tmp_path / "secrets"
    subprocess.run(["bash", str(DEPLOY / "init-secrets.sh"), str(out)], check=True,
                   capture_output=True, timeout=30)
    files = {p.name: p.read_text() for p in out.iterdir()}
    assert set(files) == {"kafka_server_jaas.conf", "peer.env", "grafana_admin_password"}
    assert (out.stat().st_mode & 0o777) == 0o700
    env = dict(line.split("=", 1) for line in files["peer.env"].splitlines())
    assert f'user_peer="{env["TIDEMARK_KAFKA_SASL_PASSWORD"]}"' in files["kafka_server_jaas.conf"]
    assert len(env["TIDEMARK_KAFKA_SASL_PASSWORD"]) == 32
    subprocess.run(["bash", str(DEPLOY / "init-secrets.sh"), str(out)], check=True,
                   capture_output=True, timeout=30)
    assert {p.name: p.read_text() for p in out.iterdir()} == files


def test_replica_unit_has_what_a_node_needs() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(UNIT.read_text())
    svc = unit["Service"]
    assert svc["ExecStart"].split()[1:] == ["replica", "run", "--config",
                                            "/etc/tidemark/cluster.toml", "--node", "%i"]
    assert svc["Restart"] == "on-failure" and svc["User"] == "tidemark"
    text = UNIT.read_text()
    for var in ("TIDEMARK_TLS_CA", "TIDEMARK_TLS_CERT", "TIDEMARK_TLS_KEY", "TIDEMARK_TLS_CRL"):
        assert f"Environment={var}=/etc/tidemark/tls/%i/" in text
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_replica_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed (Debian: apt-get install systemd)")
    # verify wants ExecStart's binary to exist: a stand-in for the venv's tidemark
    stub = tmp_path / "tidemark"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    text = UNIT.read_text().replace("/opt/tidemark/venv/bin/tidemark", str(stub))
    assert str(stub) in text
    instance = tmp_path / "tidemark-replica@p0r0.service"
    instance.write_text(text)
    proc = subprocess.run([analyze, "verify", "--man=no", str(instance)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
