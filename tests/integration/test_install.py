"""A user's install: the wheel, non-editable, in a fresh virtualenv, beside a project that has
its own ``log.py``, ``schemas/``, ``replica.py`` and ``gossip.py``.

Everything Tidemark installs lives under the one import name ``tidemark``, so the user's
modules cannot shadow it; without extras it installs neither plyvel nor PySpark, and the peer
library does not import them. Run on both ends of the supported range, 3.11 (the one
running the tests) and 3.13 when the machine has it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER_SCRIPT = textwrap.dedent('''
    import sys
    from dataclasses import dataclass

    import gossip
    import log
    import replica
    import schemas

    from tidemark.log.wire import default_codec
    from tidemark.peer_client import MessageContext, message
    from tidemark.peer_client.testing import TestBus

    assert (log.MINE, schemas.MINE, replica.MINE, gossip.MINE) == (1, 2, 3, 4)


    @message("user.Order")
    @dataclass
    class Order:
        n: int


    bus = TestBus(environment="test")
    shop, store = bus.peer("shop"), bus.peer("store")
    got = []


    @store.handler
    def on_order(o: Order, ctx: MessageContext) -> None:
        got.append(o.n)


    shop.send("store", Order(7))
    assert got == [7], got
    codec = default_codec()
    send = {"message_id": "i-1", "sender": "shop", "recipient": "store",
            "environment": "test", "message_type": "user.Order", "payload": b"x",
            "timestamp_ms": 1, "delivery_count": 0, "direct_incarnation": None}
    assert codec.decode(codec.encode("Send", send)).record == send
    heavy = sorted(m for m in ("plyvel", "pyspark") if m in sys.modules)
    assert not heavy, heavy
    print("user project OK")
''')


def _runs(exe: str, version: str) -> bool:
    """Whether ``exe`` is a working interpreter of ``version`` (a pyenv shim may not be)."""
    try:
        out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def _pythons() -> list[str]:
    found = [sys.executable]
    for version in ("3.13",):
        candidates = [shutil.which(f"python{version}") or ""]
        pyenv = Path.home() / ".pyenv" / "versions"
        if pyenv.is_dir():
            candidates += [str(p / "bin" / "python3") for p in sorted(pyenv.glob(f"{version}.*"))]
        exe = next((c for c in candidates if c and _runs(c, version)), None)
        if exe is not None:
            found.append(exe)
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(ROOT)], check=True, timeout=600)
    (whl,) = out.glob("tidemark-*.whl")
    return whl


def test_the_wheel_installs_one_import_name(wheel: Path) -> None:
    import zipfile
    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert {n for n in names if not n.endswith(".dist-info")} == {"tidemark"}
    files = set(zipfile.ZipFile(wheel).namelist())
    assert {"tidemark/py.typed", "tidemark/schemas/Send.avsc",
            "tidemark/log/poms/kafka/pom.xml"} <= files
    meta = next(n for n in files if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License: Apache-2.0" in text or "License-Expression: Apache-2.0" in text
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")
               for n in files)


@pytest.mark.parametrize("python", _pythons(), ids=lambda p: "python" + (
    "3.11" if p == sys.executable else "3.13"))
def test_a_user_project_with_its_own_log_py_uses_the_peer_library(
        wheel: Path, python: str, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check"]
    r = subprocess.run(pip + [str(wheel)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list",
                             "--format=freeze"], capture_output=True, text=True, check=True)
    installed = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert "tidemark" in installed
    assert not installed & {"plyvel", "pyspark"}, installed & {"plyvel", "pyspark"}

    project = tmp_path / "project"
    (project / "schemas").mkdir(parents=True)
    (project / "log.py").write_text("MINE = 1\n")
    (project / "schemas" / "__init__.py").write_text("MINE = 2\n")
    (project / "replica.py").write_text("MINE = 3\n")
    (project / "gossip.py").write_text("MINE = 4\n")
    (project / "app.py").write_text(USER_SCRIPT)
    run = subprocess.run([str(venv / "bin" / "python"), "app.py"], cwd=project,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "user project OK" in run.stdout
    # the operator's command needs the extras: it says so in one line, no traceback
    cli = subprocess.run([str(venv / "bin" / "tidemark"), "local", "status"], cwd=project,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    assert "pip install 'tidemark[all]'" in cli.stderr
