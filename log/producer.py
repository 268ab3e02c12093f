"""The durable producer: acks=all, idempotence, Java-compatible murmur2 partitioning."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from tidemark.log.exceptions import DeliveryError, OversizedMessageError
from tidemark.log.settings import Settings
from tidemark.log.wire import Codec, default_codec

__all__ = ["LogProducer", "DeliveryCallback"]

DeliveryCallback = Callable[[KafkaError | None, Message], None]


class LogProducer:
    """A thin typed wrapper over ``confluent_kafka.Producer`` for Tidemark records.

    Records are Avro single-object encoded with the codec. A record Kafka refuses is never
    silent: a per-record ``on_delivery`` callback sees the error, and otherwise the next
    :meth:`flush` raises :class:`DeliveryError` naming it.
    """

    def __init__(self, settings: Settings, codec: Codec | None = None, **conf: Any) -> None:
        self.settings = settings
        self.codec = codec or default_codec()
        self._producer = Producer(settings.producer_config(**conf))
        self._lock = threading.Lock()
        self._failed = 0
        self._first_error: str | None = None
        self.delivered = 0
        self._topics = {name: settings.topic(name) for name in
                        ("txlog", "queues", "directory", "config", "deadletter")}
        self._max = settings.max_message_bytes
        self._produce = self._producer.produce
        self._encode = self.codec.encode
        self._callback: DeliveryCallback = self._on_delivery

    def topic(self, logical: str) -> str:
        """Physical topic name of a logical one."""
        return self._topics.get(logical) or self.settings.topic(logical)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
            return
        with self._lock:
            self._failed += 1
            if self._first_error is None:
                self._first_error = (f"{msg.topic()}[{msg.partition()}]: {err.name()}:"
                                     f" {err.str()}")

    def produce(self, logical_topic: str, key: str | bytes | None, name: str,
                record: Mapping[str, Any], partition: int | None = None,
                on_delivery: DeliveryCallback | None = None,
                headers: list[tuple[str, bytes]] | None = None) -> None:
        """Encode ``record`` with schema ``name`` and append it to ``logical_topic``."""
        topic = self._topics.get(logical_topic) or self.settings.topic(logical_topic)
        value = self._encode(name, record)
        if headers is None and len(value) <= self._max:  # the common case, inline
            try:
                self._produce(topic, value, key, -1 if partition is None else partition,
                              on_delivery or self._callback)
                return
            except BufferError:
                pass  # produce_raw polls until there is room
        self.produce_raw(topic, key, value, partition, on_delivery, headers)

    def produce_raw(self, topic: str, key: str | bytes | None, value: bytes | None,
                    partition: int | None = None, on_delivery: DeliveryCallback | None = None,
                    headers: list[tuple[str, bytes]] | None = None) -> None:
        """Append already-encoded bytes to a physical topic (used by the dead-letter writer)."""
        if value is not None and len(value) > self._max:
            raise OversizedMessageError(
                f"record of {len(value)} bytes exceeds max_message_bytes={self._max}")
        callback = on_delivery or self._callback
        part = -1 if partition is None else partition  # -1: the configured partitioner
        while True:
            try:
                if headers:
                    self._produce(topic, value, key, part, callback,
                                  headers=list[tuple[str, str | bytes | None]](headers))
                else:
                    self._produce(topic, value, key, part, callback)
                return
            except BufferError:
                self._producer.poll(0.05)

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery callbacks."""
        return self._producer.poll(timeout)

    def flush(self, timeout: float = 60.0) -> None:
        """Wait for every record; raise :class:`DeliveryError` if any was refused."""
        remaining = self._producer.flush(timeout)
        with self._lock:
            failed, first = self._failed, self._first_error
            self._failed, self._first_error = 0, None
        if failed:
            raise DeliveryError(f"{failed} record(s) not acknowledged by Kafka; first: {first}")
        if remaining:
            raise DeliveryError(f"{remaining} record(s) still unacknowledged after {timeout}s")

    def __len__(self) -> int:
        return len(self._producer)

    @property
    def raw(self) -> Producer:
        """The underlying confluent_kafka producer."""
        return self._producer
