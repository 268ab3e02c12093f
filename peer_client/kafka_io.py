"""The Kafka side of a peer: txlog appends, directory writes, and the directory follower."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from confluent_kafka import TopicPartition

from tidemark.log.consumer import LogConsumer
from tidemark.log.exceptions import CodecError, LogError
from tidemark.log.offsets import watermarks
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.peer_client.ports import KafkaCallback
from tidemark.peer_client.records import peer_codec

__all__ = ["KafkaLog", "DirectoryFollower"]

log = logging.getLogger("peer_client.kafka")


class KafkaLog:
    """Appends encoded records to txlog and descriptors to directory, with one producer."""

    def __init__(self, settings: Settings) -> None:
        self.producer = LogProducer(settings, peer_codec())
        self._txlog = settings.topic("txlog")
        self._raw = self.producer.raw
        self._default = self.producer._on_delivery

    def append(self, key: str, value: bytes, on_delivery: KafkaCallback | None = None) -> None:
        """Append one encoded record to txlog (partition: murmur2 of ``key``). The caller
        has checked the size; a refusal reaches ``on_delivery`` (or the next flush)."""
        try:
            self._raw.produce(self._txlog, value, key, -1, on_delivery or self._default)
        except BufferError:  # librdkafka's queue is full: serve callbacks, retry
            while True:
                self._raw.poll(0.05)
                try:
                    self._raw.produce(self._txlog, value, key, -1,
                                      on_delivery or self._default)
                    return
                except BufferError:
                    continue

    def appender(self) -> Callable[[bytes, str, int, KafkaCallback], None]:
        """``append(value, key, -1, on_delivery)`` in C, with no Python frame: the producer's
        ``produce`` with txlog bound. It raises ``BufferError`` when librdkafka's queue is
        full, where :meth:`append` waits: the caller falls back to it."""
        return partial(self._raw.produce, self._txlog)

    def append_many(self, key: str, values: list[bytes],
                    on_delivery: KafkaCallback | None = None) -> None:
        """Append ``values`` in order under ``key``: one loop over the producer."""
        produce, topic, callback = self._raw.produce, self._txlog, on_delivery or self._default
        for value in values:
            try:
                produce(topic, value, key, -1, callback)
            except BufferError:
                self.append(key, value, callback)  # serves callbacks until there is room

    def publish(self, peer_id: str, descriptor: dict[str, Any],
                on_delivery: KafkaCallback | None = None) -> None:
        """Append a PeerDescriptor to the directory topic."""
        self.producer.produce("directory", peer_id, "PeerDescriptor", descriptor,
                              on_delivery=on_delivery)

    def serve(self) -> None:
        """Serve pending delivery callbacks without waiting."""
        self._raw.poll(0)

    def poll(self, timeout: float) -> int:
        """Serve delivery callbacks."""
        return self.producer.poll(timeout)

    def flush(self, timeout: float) -> None:
        """Wait for every record (raises :class:`DeliveryError` if one was refused)."""
        self.producer.flush(timeout)

    def __len__(self) -> int:
        return len(self.producer)


class DirectoryFollower:
    """Reads the directory topic to its end, then follows it in a thread."""

    def __init__(self, settings: Settings,
                 on_record: Callable[[str, dict[str, Any] | None], None]) -> None:
        self.settings = settings
        self.on_record = on_record
        self.consumer = LogConsumer(settings, peer_codec())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bad = 0

    def _apply(self, msgs: list[Any]) -> None:
        decode = self.consumer.codec.decode
        for msg in msgs:
            key = (msg.key() or b"").decode("utf-8", "replace")
            value = msg.value()
            if value is None:
                self.on_record(key, None)
                continue
            try:
                dec = decode(value)
            except CodecError as exc:
                self.bad += 1
                log.warning("directory record at %s[%d]@%d skipped: %s", msg.topic(),
                            msg.partition(), msg.offset(), exc)
                continue
            if dec.name != "PeerDescriptor":
                self.bad += 1
                log.warning("directory record at %s[%d]@%d is a %s, skipped", msg.topic(),
                            msg.partition(), msg.offset(), dec.name)
                continue
            self.on_record(key, dec.record)

    def read_to_end(self, timeout_s: float) -> int:
        """Assign every partition from the start and apply records up to the high watermarks
        seen now; returns how many partitions there are."""
        marks = watermarks(self.settings, "directory")
        topic = self.settings.topic("directory")
        self.consumer.raw.assign([TopicPartition(topic, p, lo) for p, (lo, _) in marks.items()])
        todo = {p: hi for p, (lo, hi) in marks.items() if hi > lo}
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                raise LogError(f"could not read {topic} to its end within {timeout_s}s")
            msgs = self.consumer.consume_batch(5000, 0.2)
            self._apply(msgs)
            for msg in msgs:
                part, off = msg.partition(), msg.offset()
                if part is not None and off is not None and part in todo \
                        and off + 1 >= todo[part]:
                    del todo[part]
            if todo and not msgs:  # compacted: offsets have holes, check positions
                for tp in self.consumer.raw.position([TopicPartition(topic, p) for p in todo]):
                    if tp.offset >= 0 and tp.offset >= todo[tp.partition]:
                        del todo[tp.partition]
        return len(marks)

    def start(self) -> None:
        """Follow the topic in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="peer-directory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._apply(self.consumer.consume_batch(1000, 0.1))
            except LogError as exc:
                log.error("directory follower: %s", exc)
                self._stop.wait(1.0)
            except Exception:  # noqa: BLE001 - keep following
                log.exception("directory follower failed on a record")

    def close(self) -> None:
        """Stop following and close the consumer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.consumer.close()
