"""The peer example of docs/peer_client.md runs exactly as written against the real stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from log.settings import Settings
from tests.unit.test_peer_docs import example

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_peer_example_runs_as_written(fresh_settings: Settings) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    env.update(TIDEMARK_BOOTSTRAP=fresh_settings.bootstrap,
               TIDEMARK_TOPIC_PREFIX=fresh_settings.topic_prefix,
               TIDEMARK_PARTITIONS=str(fresh_settings.partitions))
    proc = subprocess.run([sys.executable, "-c", example("peer")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "shipping got o-1 from shop (live: True)" in proc.stdout
    assert "shipping got o-2 from shop" in proc.stdout and "sent " in proc.stdout
