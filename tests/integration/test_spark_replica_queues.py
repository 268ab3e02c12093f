"""The real job's output, ingested by a real replica node, is the model's queues.

The queues job (Spark local mode) writes ``queues`` from a txlog with acks after sends, early
acks, duplicate sends, a purge, poison records and one peer's backlog; a replica node process
(layout 1x1: it owns every partition) ingests ``queues`` as it always does
(:mod:`tidemark.replica.ingest`: entries by Kafka key plus the txlog-order index). Its copy of each
peer's queue, read back through the node's ``Replay`` service, must be exactly the model
computed from txlog (:func:`tests.support.expected_queues`), in txlog order. More
traffic then acks part of the backlog (tombstones) and queues new messages; the node's copy
follows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replicas import current_epoch, replica_stack
from tests.support import (
    expected_queues,
    generate_load,
    operator_purge,
    sealed,
    wait_for,
    wait_purge_applied,
)
from tidemark.gossip.cluster_config import Epoch
from tidemark.gossip.service import ReplicaClient
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.wire import entry_record
from tidemark.spark_streaming.exceptions import QueuesError
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with replica_stack(bootstrap, tmp_path_factory.mktemp("spark-replica") / "stack",
                       "1x1") as s:
        yield s


class Traffic:
    """Sends, acks, purges and poison records to txlog."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer = LogProducer(settings)
        self.purged: dict[str, int] = {}  # peer -> the txlog offset its Purge reaches

    def send(self, peer: str, mid: str) -> None:
        self.producer.produce("txlog", peer, "Send", {
            "message_id": mid, "sender": "t", "recipient": peer,
            "environment": self.settings.environment, "message_type": "t.Event",
            "payload": mid.encode(), "timestamp_ms": int(time.time() * 1000),
            "delivery_count": 0})

    def ack(self, peer: str, mid: str) -> None:  # what a peer writes: a signed AckBatch
        self.producer.produce_raw(self.settings.topic("txlog"), peer, sealed(
            self.settings, "AckBatch", {"message_ids": [mid], "peer": peer,
                                        "environment": self.settings.environment,
                                        "timestamp_ms": int(time.time() * 1000)}))

    def purge(self, peer: str) -> None:  # an operator's, to purges: what was sent so far
        self.producer.flush()
        self.purged[peer] = operator_purge(self.settings, peer)

    def flush(self) -> None:
        self.producer.flush()


def _replica_queue(client: ReplicaClient, epoch: Epoch, peer: str, env: str
                   ) -> list[tuple[int, str]]:
    """The node's copy of ``peer``'s queue via Replay: ``(txlog offset, message id)``."""
    stream = client.replay_any(epoch, peer, env, barrier_timeout_ms=300_000)
    out = []
    try:
        for entry in stream.entries():
            out.append((entry.offset, entry_record(entry.value)["message_id"]))
            stream.ack()
    finally:
        stream.close()
    return out


def _check(settings: Settings, job: JobProcess, peers: set[str],
           purged: dict[str, int]) -> dict[str, set[str]]:
    try:
        job.wait_for_progress(600)
    except QueuesError as exc:
        pytest.fail(str(exc))
    for peer, below in purged.items():  # a Purge moves no txlog progress
        wait_purge_applied(settings, peer, below)
    expected, _, _ = expected_queues(settings)
    client = ReplicaClient()
    try:
        epoch = current_epoch(settings)

        def differs() -> str | None:  # the first peer whose copy is not the model yet
            for peer in sorted(peers | set(expected)):
                copy = _replica_queue(client, epoch, peer, settings.environment)
                ids = [mid for _, mid in copy]
                assert [o for o, _ in copy] == sorted({o for o, _ in copy}), peer  # log order
                assert len(ids) == len(set(ids)), peer
                if set(ids) != expected.get(peer, set()):
                    return peer
            return None
        # the node ingests the job's queues records after the progress it has seen (the
        # tombstones of a Purge the job applied later, say): its copy may lag a moment
        wait_for(lambda: differs() is None, 120, 0.5, "the node's copy equal to the model")
    finally:
        client.close()
    return expected


def test_replica_copy_of_the_jobs_queues_is_the_model(stack: LocalStack, tmp_path: Path) -> None:
    settings = stack.settings()
    t = Traffic(settings)
    load = generate_load(settings, peers=8, messages=4000, ack_ratio=0.5, seed=5)
    for i in range(200):
        t.ack(f"edge-{i % 4}", f"early-{i}")      # the direct path beat the log
    for i in range(200):
        t.send(f"edge-{i % 4}", f"early-{i}")     # cancelled by the earlier ack
        t.send(f"edge-{i % 4}", f"dup-{i}")
        t.send(f"edge-{i % 4}", f"dup-{i}")       # counts once
    for i in range(50):
        t.send("purged", f"gone-{i}")
    t.purge("purged")
    t.send("purged", "after-purge")
    for i in range(3000):
        t.send("down", f"backlog-{i}")            # a peer that is down
    t.producer.produce_raw(settings.topic("txlog"), "edge-1", b"\xc3\x01not-avro-at-all")
    t.producer.produce_raw(settings.topic("txlog"), None, b"no key")
    t.flush()
    job = JobProcess(settings, tmp_path / "checkpoint", tmp_path / "job.log").start()
    try:
        peers = {"purged", "down", *(f"edge-{i}" for i in range(4)), *load.peers}
        expected = _check(settings, job, peers, t.purged)
        assert expected["purged"] == {"after-purge"} and len(expected["down"]) == 3000
        for i in range(0, 3000, 3):
            t.ack("down", f"backlog-{i}")         # tombstones for a third of the backlog
        for i in range(100):
            t.send("down", f"later-{i}")
        t.ack("edge-2", "dup-2")
        t.flush()
        expected = _check(settings, job, peers, t.purged)
        assert len(expected["down"]) == 2100
        assert job.alive, job.log_tail()
    finally:
        job.stop()
