"""Dead letters of a replica node: a record ingest cannot apply is copied to ``deadletter``,
and a copy Kafka will not take is recorded in the store's own dead-letter ledger instead.

A poison record must never stop a consumer. The copy carries the reason and where the
record came from in headers (the same headers as :class:`tidemark.log.consumer.DeadLetterWriter`).
A value larger than ``max_message_bytes`` (or a key over :data:`KEY_MAX` bytes) is
truncated, and ``tidemark.truncated`` / ``tidemark.sha256`` give the original size and
hash. When the copy is still refused (the dead-letter topic allows less on this cluster,
authorization, a broker outage longer than the flush timeout) the record is written to the
store's ledger (``Z`` keys, see :meth:`tidemark.replica.store.Store.dead_letters`) in the same batch
that advances past it, so it is accounted for either way.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from tidemark.log import clock
from tidemark.log.exceptions import LogError
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings

__all__ = ["DeadLetters", "KEY_MAX", "REASON_MAX"]

log = logging.getLogger(__name__)
KEY_MAX = 1024      # longer keys are truncated in the copy
REASON_MAX = 1000   # bytes of the reason header
_PENDING = object()


class DeadLetters:
    """Copies poison records to ``deadletter``; reports the ones Kafka did not take."""

    def __init__(self, settings: Settings, source: str, flush_timeout_s: float = 30.0) -> None:
        self.settings = settings
        self.source = source
        self.flush_timeout_s = flush_timeout_s
        self.limit = settings.max_message_bytes
        self._producer: LogProducer | None = None
        self.sent = 0
        self.truncated = 0

    @property
    def producer(self) -> LogProducer:
        """The producer (created on first use)."""
        if self._producer is None:
            self._producer = LogProducer(self.settings)
        return self._producer

    def copy_of(self, msg: Message, reason: str) -> tuple[bytes | None, bytes | None,
                                                           list[tuple[str, bytes]]]:
        """``(key, value, headers)`` of the dead-letter copy of ``msg``."""
        key, value = msg.key(), msg.value()
        headers = [("tidemark.reason", reason.encode()[:REASON_MAX]),
                   ("tidemark.source", self.source.encode()),
                   ("tidemark.topic", (msg.topic() or "").encode()),
                   ("tidemark.partition", str(msg.partition()).encode()),
                   ("tidemark.offset", str(msg.offset()).encode())]
        if key is not None and len(key) > KEY_MAX:
            headers.append(("tidemark.key_truncated", str(len(key)).encode()))
            key = key[:KEY_MAX]
        if value is not None and len(value) > self.limit:
            headers.append(("tidemark.truncated", str(len(value)).encode()))
            headers.append(("tidemark.sha256", hashlib.sha256(value).hexdigest().encode()))
            value = value[:self.limit]
        return key, value, headers

    def send(self, poison: Sequence[tuple[Message, str]]) -> list[dict[str, Any]]:
        """Copy every ``(record, reason)`` to ``deadletter`` and wait for Kafka; returns a
        ledger entry for each copy Kafka did not acknowledge (empty when all were)."""
        if not poison:
            return []
        outcome: list[Any] = [_PENDING] * len(poison)
        topic = self.producer.topic("deadletter")

        def done(i: int) -> Any:
            def callback(err: KafkaError | None, _msg: Message) -> None:
                outcome[i] = None if err is None else f"{err.name()}: {err.str()}"
            return callback

        for i, (msg, reason) in enumerate(poison):
            key, value, headers = self.copy_of(msg, reason)
            if any(name == "tidemark.truncated" for name, _ in headers):
                self.truncated += 1
            try:
                self.producer.produce_raw(topic, key, value, headers=headers,
                                          on_delivery=done(i))
            except (LogError, KafkaException, BufferError, ValueError) as exc:
                outcome[i] = f"not produced: {exc}"
        if self.producer.raw.flush(self.flush_timeout_s):
            # Not delivered in time: the ledger takes them; drop what is still queued so a
            # long outage does not pile copies up (one in flight may still arrive: a
            # duplicate dead letter, never a lost one).
            self.producer.raw.purge(in_queue=True, in_flight=False)
            self.producer.raw.poll(0)
        failed = []
        now = clock.now_ms()
        for (msg, reason), result in zip(poison, outcome, strict=True):
            if result is None:
                self.sent += 1
                continue
            error = (f"not acknowledged within {self.flush_timeout_s:g}s"
                     if result is _PENDING else str(result))
            value = msg.value() or b""
            log.error("dead letter %s[%d]@%d refused by Kafka (%s); recorded in the store's "
                      "dead-letter ledger", msg.topic(), msg.partition(), msg.offset(), error)
            failed.append({"topic": msg.topic(), "partition": msg.partition(),
                           "offset": msg.offset(), "reason": reason[:REASON_MAX],
                           "error": error[:REASON_MAX], "size": len(value),
                           "sha256": hashlib.sha256(value).hexdigest(),
                           "key": (msg.key() or b"")[:KEY_MAX].decode("utf-8", "replace"),
                           "source": self.source, "detected_ms": now})
        return failed

    def close(self) -> None:
        """Deliver what is still queued (best effort)."""
        if self._producer is not None:
            self._producer.raw.flush(min(5.0, self.flush_timeout_s))
