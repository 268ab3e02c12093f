"""Fixtures shared by the fault drills of this folder."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemark.log.topics import delete_topic_set
from tidemark.stack.launcher import LocalStack


@pytest.fixture
def external_stack(request: pytest.FixtureRequest, tmp_path: Path, bootstrap: str,
                   monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    """A LocalStack over the session's Kafka cluster (``external``: its brokers are not the
    stack's own) with a fresh topic set of 4 partitions, for a test that adds processes
    (the Spark job) to it; stopped and its topics deleted afterwards. The topic prefix
    starts with the module's ``TOPIC_LETTER`` (default ``f``)."""
    folder = tmp_path / "stack"
    folder.mkdir()
    (folder / "state.json").write_text(json.dumps({"bootstrap": bootstrap, "processes": {},
                                                   "external": True}))
    letter = getattr(request.module, "TOPIC_LETTER", "f")
    monkeypatch.setenv("TIDEMARK_TOPIC_PREFIX", f"{letter}{uuid.uuid4().hex[:8]}.")
    monkeypatch.setenv("TIDEMARK_PARTITIONS", "4")
    s = LocalStack(folder)
    try:
        yield s
    finally:
        s.down(grace_s=20)
        delete_topic_set(s.settings())
