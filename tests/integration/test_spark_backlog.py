"""One down peer's backlog does not stop the queues job, and its queue stays exact.

The reproduction of the crash loop the per-peer state used to cause: ``tidemark load --peers 1
--messages N --ack-ratio 0`` (one peer that never acks: 200,000 here, 1,000,000 under
``make soak``), then two more loads of 2,000 to the same peer, then acks of part of its
backlog and traffic for other peers. The job must stay up throughout, and the compacted
queues must equal the model computed from txlog itself.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests import cluster
from tests.support import expected_queues, generate_load, sealed
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.topics import delete_topic_set, ensure_topics
from tidemark.spark_streaming.depth import read_queues
from tidemark.spark_streaming.exceptions import QueuesError
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]


def _caught_up(job: JobProcess, timeout: float) -> None:
    try:
        job.wait_for_progress(timeout)
    except QueuesError as exc:
        pytest.fail(str(exc))


def _ack(settings: Settings, peer: str, ids: list[str]) -> None:
    """What the peer writes: its acks as signed AckBatch records (100 ids each)."""
    producer = LogProducer(settings)
    now = int(time.time() * 1000)
    for i in range(0, len(ids), 100):
        producer.produce_raw(settings.topic("txlog"), peer, sealed(settings, "AckBatch", {
            "message_ids": ids[i:i + 100], "peer": peer,
            "environment": settings.environment, "timestamp_ms": now}))
    producer.flush()


# a 200k backlog runs under `make load` (about 2 minutes), a 1M one under `make soak`
@pytest.mark.parametrize("backlog", [pytest.param(200_000, marks=pytest.mark.load),
                                     pytest.param(1_000_000, marks=pytest.mark.soak)])
def test_backlog_of_one_peer_then_more_keeps_the_job_up(backlog: int, bootstrap: str,
                                                       tmp_path: Path) -> None:
    settings = cluster.settings(bootstrap=bootstrap,
                                topic_prefix=f"bl{uuid.uuid4().hex[:8]}.", partitions=4)
    ensure_topics(settings)
    job = JobProcess(settings, tmp_path / "checkpoint", tmp_path / "job.log").start()
    try:
        first = generate_load(settings, peers=1, messages=backlog, ack_ratio=0.0,
                              keep_unacked=True)
        (peer,) = first.unacked  # "peer-0": one peer, down, never acking
        started = time.monotonic()
        _caught_up(job, max(600.0, backlog / 300))
        took = time.monotonic() - started
        more = [generate_load(settings, peers=1, messages=2000, ack_ratio=0.0,
                              keep_unacked=True) for _ in range(2)]
        _ack(settings, peer, first.unacked[peer][::1000] + more[0].unacked[peer][:10])
        others = generate_load(settings, peers=20, messages=5000, ack_ratio=0.5, seed=3)
        _caught_up(job, 600)
        assert job.alive, job.log_tail()
        expected, _, bad = expected_queues(settings, timeout_s=300)
        view = read_queues(settings, timeout_s=300)
        assert bad == 0
        acked = len(first.unacked[peer][::1000]) + 10
        mine = others.peers.get(peer, {"sent": 0, "acked": 0})  # peer-0 is among the 20 too
        assert len(view.queues[peer]) == backlog + 4000 - acked + mine["sent"] - mine["acked"]
        assert view.queues == expected  # nothing missing, nothing stale
        assert view.total == backlog + 4000 - acked + others.sent - others.acked
        print(f"\n{backlog} backlog messages materialized {took:.0f}s after they were written")
    finally:
        job.stop()
        delete_topic_set(settings)
