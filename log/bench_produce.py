"""``tidemark bench produce``: the log API's producer beside a raw confluent-kafka producer.

Both run in the same process, against the same cluster, with the same durable settings
(acks=all, idempotence, RF=3, min ISR 2) and a delivery callback each, writing the same keys
to a bench topic shaped like txlog. The raw producer sends pre-built bytes of the encoded
record's size; the log producer builds and Avro-encodes a Send per message, as peers do.
Two uncounted rounds of each side warm the brokers up; then rounds alternate so that neither
side gets a warmer cluster; the median of each is reported.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from log.producer import LogProducer
from log.settings import Settings
from log.topics import topic_specs

__all__ = ["bench_produce", "bench_topic", "raw_produce_rate", "WARM_UP_ROUNDS"]

#: Uncounted rounds of each side before the measured ones (brokers' JIT, page cache).
WARM_UP_ROUNDS = 2


def bench_topic(settings: Settings) -> str:
    """The bench topic (created like txlog if missing); no component reads it."""
    name = settings.topic("bench")
    admin = AdminClient(settings.admin_config())
    if name not in admin.list_topics(timeout=10).topics:
        txlog = topic_specs(settings)[0]
        fut = admin.create_topics([NewTopic(name, txlog.partitions, settings.replication_factor,
                                            config=txlog.config)])[name]
        try:
            fut.result()
        except Exception as exc:  # already created by a concurrent run
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    return name


def raw_produce_rate(settings: Settings, topic: str, keys: list[str], value: bytes) -> float:
    """The raw baseline: msg/s of a plain confluent-kafka producer with the durable settings
    writing ``value`` under each key, flushed."""
    producer = Producer(settings.producer_config())
    failures = []

    def on_delivery(err, msg):  # noqa: ANN001 - confluent callback signature
        if err is not None:
            failures.append(err)

    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for key in keys:
        try:
            produce(topic, value, key, on_delivery=on_delivery)
        except BufferError:
            poll(0.05)
            produce(topic, value, key, on_delivery=on_delivery)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"raw producer: {len(failures)} failed deliveries: {failures[0]}")
    return len(keys) / elapsed


def _run_log(settings: Settings, keys: list[str], payload: bytes) -> float:
    producer = LogProducer(settings)
    env = settings.environment
    produce = producer.produce
    start = time.perf_counter()
    for i, key in enumerate(keys):
        produce("bench", key, "Send", {
            "message_id": f"bench-{i}", "sender": "bench", "recipient": key,
            "environment": env, "message_type": "bench.Event", "payload": payload,
            "timestamp_ms": 1_700_000_000_000 + i, "delivery_count": 0})
    producer.flush(120)
    return len(keys) / (time.perf_counter() - start)


def bench_produce(settings: Settings, messages: int = 200_000, payload_bytes: int = 150,
                  rounds: int = 3, peers: int = 1000,
                  progress: Callable[[str], None] = lambda m: None) -> dict:
    """Run alternating rounds; returns rates (msg/s), their medians and the ratio."""
    topic = bench_topic(settings)
    payload = os.urandom(payload_bytes)
    keys = [f"peer-{i % peers}" for i in range(messages)]
    sample = LogProducer(settings).codec.encode("Send", {
        "message_id": "bench-0", "sender": "bench", "recipient": keys[0],
        "environment": settings.environment, "message_type": "bench.Event",
        "payload": payload, "timestamp_ms": 1_700_000_000_000, "delivery_count": 0})
    raw_value = os.urandom(len(sample))
    # Two full uncounted rounds: right after a stack starts, the brokers' JIT compilers take
    # a quarter of a core each for the first minute of load (measured from /proc).
    for w in range(WARM_UP_ROUNDS):
        progress(f"warm-up round {w + 1}/{WARM_UP_ROUNDS} (not counted)")
        raw_produce_rate(settings, topic, keys, raw_value)
        _run_log(settings, keys, payload)
    raw_rates, log_rates = [], []
    for r in range(rounds):
        raw_rates.append(raw_produce_rate(settings, topic, keys, raw_value))
        progress(f"round {r + 1}/{rounds}: raw {raw_rates[-1]:,.0f} msg/s")
        log_rates.append(_run_log(settings, keys, payload))
        progress(f"round {r + 1}/{rounds}: log {log_rates[-1]:,.0f} msg/s")
    raw, ours = statistics.median(raw_rates), statistics.median(log_rates)
    return {"messages": messages, "payload_bytes": payload_bytes, "record_bytes": len(sample),
            "rounds": rounds, "raw_msgs_per_s": round(raw), "log_msgs_per_s": round(ours),
            "ratio": round(ours / raw, 3), "target_ratio": 0.8,
            "raw_rounds": [round(x) for x in raw_rates],
            "log_rounds": [round(x) for x in log_rates]}
