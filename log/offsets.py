"""Watermark lookups and record deletion (advancing the log start)."""

from __future__ import annotations

from typing import Iterable

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from log.exceptions import LogError
from log.settings import Settings

__all__ = ["watermarks", "end_offsets", "log_start_offsets", "delete_records"]

_RETRY = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
          KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT, KafkaError._TIMED_OUT}


def watermarks(settings: Settings, logical_topic: str, partitions: Iterable[int] | None = None,
               timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """``{partition: (log_start, high_watermark)}`` for a logical topic."""
    topic = settings.topic(logical_topic)
    consumer = Consumer(settings.consumer_config())
    try:
        if partitions is None:
            try:
                md = consumer.list_topics(topic, timeout=timeout)
            except KafkaException as exc:
                raise LogError(f"cannot reach Kafka for {topic}: {exc.args[0].str()}") from None
            if topic not in md.topics or md.topics[topic].error is not None:
                raise LogError(f"topic {topic} does not exist")
            partitions = sorted(md.topics[topic].partitions)
        deadline = time.monotonic() + timeout
        out = {}
        for p in partitions:
            while True:
                try:
                    out[p] = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                            timeout=max(0.5, deadline - time.monotonic()))
                    break
                except KafkaException as exc:  # leadership moving: retry until the deadline
                    if not exc.args[0].retriable() and exc.args[0].code() not in _RETRY \
                            or time.monotonic() > deadline:
                        raise LogError(f"watermarks of {topic}[{p}]: {exc.args[0].str()}") from None
                    time.sleep(0.2)
        return out
    finally:
        consumer.close()


def end_offsets(settings: Settings, logical_topic: str,
                partitions: Iterable[int] | None = None) -> dict[int, int]:
    """High watermark per partition."""
    return {p: hi for p, (_, hi) in watermarks(settings, logical_topic, partitions).items()}


def log_start_offsets(settings: Settings, logical_topic: str,
                      partitions: Iterable[int] | None = None) -> dict[int, int]:
    """Log start offset per partition."""
    return {p: lo for p, (lo, _) in watermarks(settings, logical_topic, partitions).items()}


def delete_records(settings: Settings, logical_topic: str, before: dict[int, int],
                   timeout: float = 30.0) -> dict[int, int]:
    """Advance the log start of each partition to ``before[p]``; returns the new starts."""
    admin = AdminClient(settings.admin_config())
    topic = settings.topic(logical_topic)
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in before.items()],
                                   request_timeout=timeout)
    out = {}
    for tp, fut in futures.items():
        result = fut.result()
        out[tp.partition] = getattr(result, "low_watermark", None) or before[tp.partition]
    return out
