"""A wiped replica whose first rejoin attempt fails (the config append raises) must still
rejoin on its next start: the "new store" state lasts until the rejoin is committed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

import tidemark.replica.epochs as epochs_module  # the rejoin step of Node.start
from tests.replicas import load_to_cut, replica_stack, status, txlog_ust
from tests.support import wait_for
from tidemark.replica.config import load_cluster_file
from tidemark.replica.node import Node
from tidemark.stack.replicas import CONFIG_NAME, plan

pytestmark = pytest.mark.integration


def _row(doc: dict | None, node: str) -> dict:
    return next((n for n in (doc or {}).get("nodes", []) if n["id"] == node), {})


def test_failed_rejoin_is_retried_on_the_next_start(bootstrap: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x2", min_age_ms=3_600_000) as stack:
        first = load_to_cut(stack, 1000, seed=31)
        stack.kill("p0r1")
        shutil.rmtree(stack.state_dir / "replicas" / "p0r1")

        def refused(*args: object, **kwargs: object) -> None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "config append refused"))
        monkeypatch.setattr(epochs_module, "append_epoch", refused)
        cf = load_cluster_file(stack.state_dir / CONFIG_NAME)
        node = Node(cf, "p0r1")
        with pytest.raises(KafkaException):
            node.start()  # the store was opened (and created), the rejoin was not appended
        node.close()
        monkeypatch.undo()

        stack.up(extra=[lambda s: plan(s, "1x2")], timeout_s=60)  # the next start
        doc = wait_for(lambda: (lambda d: d if d and d["epoch"] >= 3 and
                                _row(d, "p0r1").get("role") == "replica" else None)(
            status(stack, "p0r0")), 60, what="p0r1 rejoined through joining and promoted")
        assert txlog_ust(doc) == first  # the cut never went down
