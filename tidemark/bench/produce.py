"""``tidemark bench produce``: the log API's producer beside a raw confluent-kafka producer.

Both run in the same process, against the same cluster, with the same durable settings
(acks=all, idempotence, RF=3, min ISR 2) and a delivery callback each, writing the same keys
to a bench topic shaped like txlog. The raw producer sends pre-built bytes of the encoded
record's size; the log producer builds and Avro-encodes a Send per message, as peers do.
Uncounted rounds of each side warm the brokers up until both sides' rates settle and, given
a probe, the brokers' JIT compilers are quiet (:func:`warm_up`); then rounds alternate so
that neither side gets a warmer cluster; the median of each is reported.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.topics import prefer_leaders, topic_specs

__all__ = ["bench_produce", "bench_topic", "raw_produce_rate", "warm_up", "warm_up_report",
           "WARM_UP_ROUNDS", "JIT_KEY", "JIT_QUIET_CORES"]

#: Uncounted rounds of each side before the measured ones (brokers' JIT, page cache): at
#: least this many, then more until the rates settle (:func:`warm_up`).
WARM_UP_ROUNDS = 2
#: The most warm-up rounds before measuring anyway.
MAX_WARM_UP_ROUNDS = 10
#: Warm-up ends once each side's last two rounds differ by at most this fraction.
WARM_UP_TOLERANCE = 0.1
#: With a probe of the brokers' JIT compilers, warm-up also waits until they used at most
#: this many cores over the last round (at most :data:`MAX_JIT_WARM_UP_ROUNDS` rounds).
JIT_QUIET_CORES = 0.1
MAX_JIT_WARM_UP_ROUNDS = 40
#: The key of the JIT compilers' cores per round in what :func:`warm_up` returns.
JIT_KEY = "brokers_jit_cores"


def warm_up(sides: Mapping[str, Callable[[], float]],
            progress: Callable[[str], None] = lambda m: None,
            min_rounds: int = WARM_UP_ROUNDS, max_rounds: int = MAX_WARM_UP_ROUNDS,
            tolerance: float = WARM_UP_TOLERANCE,
            jit: Callable[[], float] | None = None) -> dict[str, list[float]]:
    """Uncounted rounds of every side (name -> one round's rate) until each side's last two
    rates are within ``tolerance`` of each other (at least ``min_rounds``, at most
    ``max_rounds``); returns the rates, for the report. Right after a stack starts, the
    brokers' JIT compilers are still busy and a side can run at half its later rate for a
    minute of load: a fixed number of rounds left that in the measured ones.

    ``jit``, when given, returns the CPU seconds the brokers' JIT compilers have used so far
    (the CLI passes one for the local stack, whose broker processes it knows). Warm-up then also
    lasts until they used at most :data:`JIT_QUIET_CORES` over a round (up to
    :data:`MAX_JIT_WARM_UP_ROUNDS`), and the cores of each round are returned under
    :data:`JIT_KEY`. Two rates in a row can agree while the compilers still take half a core
    of the two: the side that needs the most CPU of its own (the peer's Python) then measures
    low, and its ratio depended on how long the brokers had been up."""
    rates: dict[str, list[float]] = {name: [] for name in sides}
    cores: list[float] = []
    rounds = max_rounds if jit is None else max(max_rounds, MAX_JIT_WARM_UP_ROUNDS)
    for w in range(rounds):
        started, used = time.perf_counter(), jit() if jit is not None else 0.0
        for name, run in sides.items():
            rates[name].append(run())
        line = ", ".join(f"{name} {r[-1]:,.0f}/s" for name, r in rates.items())
        if jit is not None:
            cores.append((jit() - used) / (time.perf_counter() - started))
            line += f"; brokers' JIT compilers {cores[-1]:.2f} cores"
        progress(f"warm-up round {w + 1} (not counted): {line}")
        settled = w + 1 >= min_rounds and all(
            abs(r[-1] - r[-2]) <= tolerance * max(r[-1], r[-2]) for r in rates.values())
        if settled and (jit is None or cores[-1] <= JIT_QUIET_CORES):
            break
    if jit is not None:
        rates[JIT_KEY] = cores
    return rates


def warm_up_report(warm: Mapping[str, list[float]]) -> dict[str, list[float]]:
    """What :func:`warm_up` returned, rounded for a report (rates to 1 msg/s, cores to 0.01)."""
    return {k: [round(x, 2) if k == JIT_KEY else round(x) for x in v] for k, v in warm.items()}


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
        prefer_leaders(admin, [name], time.monotonic() + 60)
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
                  progress: Callable[[str], None] = lambda m: None,
                  jit: Callable[[], float] | None = None) -> dict:
    """Run alternating rounds; returns rates (msg/s), their medians and the ratio. ``jit``:
    a probe of the brokers' JIT compilers for the warm-up (:func:`warm_up`)."""
    topic = bench_topic(settings)
    payload = os.urandom(payload_bytes)
    keys = [f"peer-{i % peers}" for i in range(messages)]
    sample = LogProducer(settings).codec.encode("Send", {
        "message_id": "bench-0", "sender": "bench", "recipient": keys[0],
        "environment": settings.environment, "message_type": "bench.Event",
        "payload": payload, "timestamp_ms": 1_700_000_000_000, "delivery_count": 0})
    raw_value = os.urandom(len(sample))
    # right after a stack starts, the brokers' JIT compilers take up to half of the 2 cores
    # for the first minutes of load (measured from /proc): warm_up waits them out
    warm = warm_up({"raw": lambda: raw_produce_rate(settings, topic, keys, raw_value),
                    "log": lambda: _run_log(settings, keys, payload)}, progress, jit=jit)
    raw_rates, log_rates = [], []
    for r in range(rounds):
        raw_rates.append(raw_produce_rate(settings, topic, keys, raw_value))
        progress(f"round {r + 1}/{rounds}: raw {raw_rates[-1]:,.0f} msg/s")
        log_rates.append(_run_log(settings, keys, payload))
        progress(f"round {r + 1}/{rounds}: log {log_rates[-1]:,.0f} msg/s")
    raw, ours = statistics.median(raw_rates), statistics.median(log_rates)
    return {"messages": messages, "payload_bytes": payload_bytes, "record_bytes": len(sample),
            "rounds": rounds, "raw_msgs_per_s": round(raw), "log_msgs_per_s": round(ours),
            "ratio": round(ours / raw, 3), "target_ratio": 0.9,
            "raw_rounds": [round(x) for x in raw_rates],
            "log_rounds": [round(x) for x in log_rates],
            "warm_up_rounds": warm_up_report(warm)}
