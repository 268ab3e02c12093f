"""Ingest of the compacted queues topic on real Kafka + LevelDB: upserts, tombstones,
progress, holes counted by position, and the delete.retention rebuild rule."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import cluster
from tests.support import wait_for
from tidemark.log.offsets import end_offsets
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.topics import delete_topic_set, ensure_topics
from tidemark.replica.ingest import Ingestor
from tidemark.replica.store import Store

pytestmark = pytest.mark.integration


def entry(mid: str, offset: int) -> dict:
    return {"peer": "bob", "message_id": mid, "sender": "al", "message_type": "t",
            "payload": b"p", "timestamp_ms": 1, "txlog_partition": 0, "txlog_offset": offset,
            "delivery_count": 0}


@pytest.fixture
def own_settings(bootstrap: str) -> Iterator[Settings]:
    """A topic set of this test's own, deleted afterwards (also on a cluster named by
    TIDEMARK_BOOTSTRAP)."""
    settings = cluster.settings(bootstrap=bootstrap,
                                topic_prefix=f"t{uuid.uuid4().hex[:10]}.", partitions=4)
    ensure_topics(settings)
    try:
        yield settings
    finally:
        delete_topic_set(settings)


def test_queues_upserts_tombstones_and_rebuild(own_settings: Settings, tmp_path: Path) -> None:
    settings = own_settings
    producer = LogProducer(settings)
    for i in range(3):
        producer.produce("queues", f"bob/m{i}", "QueueEntry", entry(f"m{i}", i), partition=0)
    producer.produce_raw(settings.topic("queues"), b"bob/m1", None, partition=0)
    producer.produce("queues", "progress/0", "QueueProgress",
                     {"txlog_partition": 0, "next_offset": 3, "batch_id": 1, "timestamp_ms": 1},
                     partition=0)
    producer.flush()
    end = end_offsets(settings, "queues")[0]

    store = Store(tmp_path / "s", "n1")
    ingest = Ingestor(settings, store, "n1")
    ingest.assign([0])

    def caught_up() -> bool:
        ingest.step(0.2)
        return store.position("queues", 0) == end
    wait_for(caught_up, 30, what="queues/0 applied")
    keys = sorted(k for k, _ in store.queue_entries(0))
    assert keys == [b"bob/m0", b"bob/m2"]
    assert store.map("queues", 0).base_end == end and store.db.get(b"R\x00\x00")
    ingest.close()

    # A reader that was away longer than delete.retention.ms rebuilds from a full read.
    stale = Ingestor(settings.with_overrides(queues_delete_retention_ms=1), store, "n1")
    last = store.applied_ms[("queues", 0)]
    wait_for(lambda: int(time.time() * 1000) - last > 1, 5,
             what="the last-applied time older than delete.retention.ms (1 ms)")
    stale.assign([0])
    assert store.position("queues", 0) is None  # forgotten, re-read from the log start
    wait_for(lambda: (stale.step(0.2), store.position("queues", 0) == end)[1], 30,
             what="queues/0 rebuilt")
    assert sorted(k for k, _ in store.queue_entries(0)) == [b"bob/m0", b"bob/m2"]
    stale.close()
    store.close()
