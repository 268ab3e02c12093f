"""The real queues job (Spark local mode) against the real Kafka cluster.

One job process serves the whole module: ``tidemark load`` writes >= 50k transactions, and
once progress covers txlog's end offsets the compacted queues view must equal the model
computed from txlog itself, and ``queues depth --json`` must total sent - acked. Then early
acks, duplicate sends, a purge and poison records follow through the same running job.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support import (
    converge,
    expected_queues,
    operator_purge,
    sealed,
    tidemark_cli,
    wait_purge_applied,
)
from tidemark.log.consumer import LogConsumer
from tidemark.log.offsets import end_offsets
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.spark_streaming.depth import read_queues
from tidemark.spark_streaming.state_groups import choose_groups
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(420)]
TOPIC_LETTER = "q"  # the settings fixture


def test_load_materializes_exact_queues(settings: Settings, job: JobProcess) -> None:
    started = time.monotonic()
    summary = json.loads(tidemark_cli(settings, "load", "--peers", "40", "--messages", "35000",
                                      "--ack-ratio", "0.5", "--seed", "7", "--json",
                                      timeout=300))
    assert summary["sent"] + summary["acked"] >= 50_000
    converge(job)
    caught_up = time.monotonic() - started
    expected, ends, bad = expected_queues(settings)
    assert bad == 0
    view = read_queues(settings)
    assert view.queues == expected
    assert view.covers({p: e for p, e in ends.items() if e})
    report = json.loads(tidemark_cli(settings, "queues", "depth", "--json", timeout=300))
    assert report["total"] == summary["sent"] - summary["acked"]
    assert report["peers"] == {p: s["sent"] - s["acked"] for p, s in summary["peers"].items()
                               if s["sent"] - s["acked"]}
    assert set(report["progress"]) == {str(p) for p, e in ends.items() if e}
    one = next(iter(report["peers"]))
    alone = json.loads(tidemark_cli(settings, "queues", "depth", "--json", "--peer", one,
                                    timeout=300))
    assert alone["peers"] == {one: report["peers"][one]}
    print(f"\n{summary['sent'] + summary['acked']} transactions: load + materialization"
          f" {caught_up:.1f}s (job started {time.monotonic() - job.started_at:.0f}s ago)")


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash`` of an int column (Murmur3_x86_32.hashInt), written out independently."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF
    k1 = rotl((value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def test_each_state_group_has_a_state_partition_of_its_own(settings: Settings,
                                                           job: JobProcess) -> None:
    """The job's new checkpoint keeps spread group keys: Spark's hash partitioning (written
    out here, not asked of Spark) sends group g's key to state partition g % partitions, so
    the groups of a batch run in tasks of their own, side by side."""
    converge(job)
    layout = choose_groups(job.checkpoint, None, 0, 0)  # reads the marker the job wrote
    partitions = min(2, settings.partitions)  # the job's local[2], 4 txlog partitions
    assert layout.count == partitions
    assert [_murmur3_int(k) % partitions for k in layout.keys] == \
        [g % partitions for g in range(layout.count)]
    assert _murmur3_int(0) == 933211791  # what Spark's hash(0) gives


def test_early_acks_duplicates_purge_and_poison(settings: Settings, job: JobProcess) -> None:
    producer = LogProducer(settings)
    now = int(time.time() * 1000)
    env = settings.environment

    def send(peer: str, mid: str) -> None:
        producer.produce("txlog", peer, "Send", {
            "message_id": mid, "sender": "t", "recipient": peer, "environment": env,
            "message_type": "t.Event", "payload": b"p", "timestamp_ms": now,
            "delivery_count": 0})

    def ack(peer: str, mid: str) -> None:  # what a peer writes: a signed AckBatch
        producer.produce_raw(settings.topic("txlog"), peer, sealed(settings, "AckBatch", {
            "message_ids": [mid], "peer": peer, "environment": env, "timestamp_ms": now}))

    for i in range(300):
        peer = f"edge-{i % 7}"
        ack(peer, f"early-{i}")           # the direct path beat the log
    producer.produce_raw(settings.topic("txlog"), "edge-1", b"\xc3\x01not-avro-at-all")
    producer.produce_raw(settings.topic("txlog"), "edge-2", b"plain garbage")
    producer.produce_raw(settings.topic("txlog"), None, b"no key")
    producer.flush()
    for i in range(300):
        peer = f"edge-{i % 7}"
        send(peer, f"early-{i}")          # cancelled by the earlier ack
        send(peer, f"dup-{i}")
        send(peer, f"dup-{i}")            # counts once
    send("edge-3", "late-acked")
    ack("edge-3", "late-acked")
    producer.flush()
    below = operator_purge(settings, "edge-5")  # to purges: what edge-5 was sent so far
    send("edge-5", "after-purge")
    producer.flush()
    converge(job)
    wait_purge_applied(settings, "edge-5", below)
    expected, _, bad = expected_queues(settings)
    assert bad == 3
    view = read_queues(settings)
    assert view.queues == expected
    assert view.queues["edge-3"] == {f"dup-{i}" for i in range(300) if i % 7 == 3}
    assert view.queues["edge-5"] == {"after-purge"}
    assert job.alive, job.log_tail()
    dead = _deadletters(settings, 3)
    assert sorted(v for _, v, _ in dead) == sorted([b"\xc3\x01not-avro-at-all",
                                                    b"plain garbage", b"no key"])
    assert all(h.get("tidemark.reason") for _, _, h in dead)


def _deadletters(settings: Settings, count: int) -> list[tuple[bytes | None, bytes, dict]]:
    from confluent_kafka import TopicPartition
    ends = end_offsets(settings, "deadletter")
    out = []
    with LogConsumer(settings) as consumer:
        consumer.raw.assign([TopicPartition(settings.topic("deadletter"), p, 0) for p in ends])
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume_batch(100, 0.5):
                out.append((msg.key(), msg.value(),
                            {k: v.decode() for k, v in (msg.headers() or [])}))
    return out
