"""The test-double example of docs/peer_client.md runs exactly as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def example(name: str) -> str:
    """The python block after ``<!-- example: name -->`` in docs/peer_client.md."""
    text = (ROOT / "docs" / "peer_client.md").read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {name} -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert match, f"docs/peer_client.md has no example {name!r}"
    return match.group(1)


def test_testing_example_runs_as_written() -> None:
    proc = subprocess.run([sys.executable, "-c", example("testing")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_readme_shows_the_tested_peer_example() -> None:
    """The README's example is the one tests/integration/test_peer_replay.py runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- example: peer -->\s*```python\n(.*?)```", readme, re.DOTALL)
    assert match and match.group(1) == example("peer")
