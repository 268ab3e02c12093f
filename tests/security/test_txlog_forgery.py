"""Forged acker records appended straight to txlog (real Kafka, replica nodes, the Spark
queues job, all secure): whoever may write txlog cannot make a message vanish.

(a) Unsigned acks, an ack signed by another peer and an old single-id Ack for a message
queued for a down peer are dead-lettered by the job and the replicas, the message stays in
the peer's queue, and the peer still gets it by replay when it starts.
(b) Purges live in their own topic, which only the operator's Kafka user may write
(``tests/security/test_kafka_acls.py`` shows a peer's user refused there). An operator's
signed Purge appended to txlog, a Purge of another environment (signed by a valid operator)
and a Purge signed by a peer are dead-lettered and the queue is unchanged; an operator's
Purge of the right environment then empties it (the path itself works)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from tests.replicas import status
from tests.support import converge, operator_purge, sealed, signers, wait_for, wait_purge_applied
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.wire import default_codec
from tidemark.peer_client import MessageContext, message
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.replay import ReplicaReplayer
from tidemark.replica.ingest import PURGE_IN_TXLOG
from tidemark.spark_streaming.deadletters import read_letters
from tidemark.spark_streaming.depth import read_queues
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.load,
              pytest.mark.timeout(600)]


@message("forgetest.Order")
@dataclass
class Order:
    n: int


def _post(settings: Settings, to: str, count: int) -> list[str]:
    """``count`` Orders posted to ``to`` (down), logged before this returns."""
    with Peer("shop", None, settings) as shop:
        ids = [shop.post(to, Order(n)) for n in range(count)]
        assert shop.flush(60)
    return ids


def _unsigned(name: str, record: dict) -> bytes:
    return default_codec().encode(name, {**record, "signer": b"", "signature": b""})


def _letters(settings: Settings, peer: str) -> list[str]:
    """The reasons of the dead letters of ``peer``'s records."""
    return [x.reason for x in read_letters(settings, peer)]


def _refusals(settings: Settings, peer: str, kind: str) -> list[str]:
    """The sources of the dead letters refusing ``peer``'s records for ``kind``."""
    return [x.source for x in read_letters(settings, peer)
            if x.reason.startswith(f"refused ({kind})")]


def test_forged_acks_are_dead_lettered_and_the_message_is_replayed(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    stack, job = replicas_job
    settings = stack.settings()
    env, now = settings.environment, int(time.time() * 1000)
    assert signers() is not None, "the session runs secure"
    [mid] = _post(settings, "victim", 1)
    producer = LogProducer(settings)
    txlog = settings.topic("txlog")
    batch = {"peer": "victim", "environment": env, "message_ids": [mid], "timestamp_ms": now}
    producer.produce_raw(txlog, "victim", _unsigned("AckBatch", batch))
    mallory = signers().peer(env, "mallory")  # a valid certificate, of another peer
    producer.produce_raw(txlog, "victim", mallory.seal(_unsigned("AckBatch", batch)))
    producer.produce_raw(txlog, "victim", default_codec().encode("Ack", {
        "message_id": mid, "peer": "victim", "environment": env, "timestamp_ms": now}))
    producer.flush(30)
    converge(job)

    wait_for(lambda: len(_refusals(settings, "victim", "signature")) >= 3 * 3, 60, 0.5,
             "the job's and both replicas' dead letters")
    sources = _refusals(settings, "victim", "signature")
    assert sources.count("spark-queues") == 3, sources
    assert sum(s.startswith("replica:") for s in sources) == 6, sources  # 2 replicas x 3
    assert mid in read_queues(settings).queues.get("victim", set())
    counts = [(status(stack, n) or {}).get("ingest_counts", {}).get("refused_signature", 0)
              for n in ("p0r0", "p0r1", "p1r0", "p1r1")]
    assert sum(counts) == 6, counts

    seen: list[tuple[str, bool]] = []
    lock = threading.Lock()

    def on(order: Order, ctx: MessageContext) -> None:
        with lock:
            seen.append((ctx.message_id, ctx.replay))
    victim = Peer("victim", None, settings, replayer=ReplicaReplayer(settings))
    victim.handler(Order)(on)
    with victim:
        wait_for(lambda: len(seen) >= 1, 120, 0.05, "the victim handling its message")
    assert seen == [(mid, True)], seen
    assert job.alive, job.log_tail()


def test_cross_environment_and_peer_signed_purges_change_nothing(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    stack, job = replicas_job
    settings = stack.settings()
    env, now = settings.environment, int(time.time() * 1000)
    ids = _post(settings, "keeper", 3)
    producer = LogProducer(settings)
    own = {"peer": "keeper", "environment": env, "timestamp_ms": now}
    producer.produce_raw(settings.topic("txlog"), "keeper",  # an operator's, but in txlog
                         sealed(settings, "Purge", own, operator="ops"))
    producer.flush(30)
    operator_purge(settings, "keeper", environment="staging", operator="ops")
    operator_purge(settings, "keeper", operator=None)  # signed by keeper itself
    operator_purge(settings, "keeper", operator="ops",  # another partition's
                   partition=(partition_for_peer("keeper", settings.partitions) + 1)
                   % settings.partitions)
    converge(job)
    assert read_queues(settings).queues.get("keeper") == set(ids)
    wait_for(lambda: len(_letters(settings, "keeper")) >= 5, 60, 0.5,
             "the refusals: the job's four, and the replicas' of the Purge in txlog")
    assert _refusals(settings, "keeper", "environment") == ["spark-queues"]
    assert _refusals(settings, "keeper", "signature") == ["spark-queues"]
    reasons = _letters(settings, "keeper")
    assert sum("does not belong in txlog" in r for r in reasons) == 1  # the job's
    assert sum(PURGE_IN_TXLOG in r for r in reasons) >= 2  # both replicas of the partition
    assert sum("in purges/" in r for r in reasons) == 1  # the job's: not the peer's partition

    below = operator_purge(settings, "keeper", operator="ops")
    assert below >= 3
    wait_purge_applied(settings, "keeper", below)  # the job's copy comes after the tombstones
    assert not read_queues(settings).queues.get("keeper")  # an operator's Purge counts
    assert job.alive, job.log_tail()
