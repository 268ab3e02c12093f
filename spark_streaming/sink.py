"""The job's ``foreachBatch`` sink: a batch's rows to queues and deadletter, then progress."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from log.exceptions import OversizedMessageError
from log.producer import LogProducer
from log.settings import Settings
from spark_streaming.queue_state import progress_key
from spark_streaming.transform import DEAD, ENTRY, MARK, TOMBSTONE

__all__ = ["BatchWriter"]

log = logging.getLogger("spark_streaming.job")


class BatchWriter:
    """``foreachBatch`` sink: the batch's rows, flushed; then one QueueProgress per partition.

    The batch's output is net changes (each queue key at most once), so it is collected to
    the driver in one Spark job and written with the project's durable producer (settings
    from :class:`~log.settings.Settings` only). ``flush`` raises if Kafka refused anything,
    which fails the batch before its progress is written; the restarted batch rewrites the
    same rows.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer: LogProducer | None = None
        self.batches = 0
        self.dead = 0
        self.profile = os.environ.get("TIDEMARK_QUEUES_PROFILE")
        self.timings: dict[str, float] = {}

    @property
    def producer(self) -> LogProducer:
        """The driver's producer (created on first use, in the driver process)."""
        if self._producer is None:
            self._producer = LogProducer(self.settings)
        return self._producer

    def _dead(self, key: bytes | None, value: bytes | None, reason: str, part: int,
              offset: int) -> None:
        """Copy a record to deadletter (without its bytes if they are too large)."""
        headers = [("tidemark.reason", reason.encode()[:1000]),
                   ("tidemark.source", b"spark-queues"),
                   ("tidemark.topic", self.settings.topic("txlog").encode()),
                   ("tidemark.partition", str(part).encode()),
                   ("tidemark.offset", str(offset).encode())]
        topic = self.producer.topic("deadletter")
        try:
            self.producer.produce_raw(topic, key, value, headers=headers)
        except OversizedMessageError as exc:
            headers[0] = ("tidemark.reason", f"{reason}; value dropped: {exc}".encode()[:1000])
            self.producer.produce_raw(topic, key, None, headers=headers)

    def __call__(self, df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        rows = _collect(df)
        t1 = time.perf_counter()
        self.write(batch_id, rows)
        t2 = time.perf_counter()
        log.debug("batch %d: %d rows, spark %.0f ms, kafka %.0f ms", batch_id, len(rows),
                  (t1 - t0) * 1e3, (t2 - t1) * 1e3)
        if self.profile:
            import json
            with open(self.profile, "a") as out:
                out.write(json.dumps({"sink": batch_id, "rows": len(rows), "t0": time.time(),
                                      "collect_ms": round((t1 - t0) * 1e3, 1),
                                      **self.timings}) + "\n")

    def write(self, batch_id: int, rows: list[tuple[Any, ...]]) -> None:
        """Write one batch's output rows ``(kind, key, value, partition, offset, reason)``,
        then its progress records."""
        producer = self.producer
        queues, deadletter = producer.topic("queues"), producer.topic("deadletter")
        produce = producer.produce_raw
        top: dict[int, int] = {}
        dead = 0
        t0 = time.perf_counter()
        for kind, key, value, part, offset, reason in rows:
            if kind in (ENTRY, TOMBSTONE):
                try:
                    produce(queues, key, value, partition=part)
                except OversizedMessageError as exc:  # a Send near the size limit
                    self._dead(key, None, f"queue entry not written: {exc}", part, offset)
                    dead += 1
            elif kind == MARK:
                top[part] = max(top.get(part, -1), offset)
            elif kind == DEAD:
                self._dead(key, value, reason or "", part, offset)
                dead += 1
        t1 = time.perf_counter()
        producer.flush()  # every row of the batch is acknowledged before its progress
        t2 = time.perf_counter()
        if dead:
            self.dead += dead
            log.warning("batch %d: %d poison record(s) sent to %s", batch_id, dead, deadletter)
        now = int(time.time() * 1000)
        for part, offset in sorted(top.items()):
            producer.produce("queues", progress_key(part), "QueueProgress", {
                "txlog_partition": part, "next_offset": offset + 1, "batch_id": batch_id,
                "timestamp_ms": now}, partition=part)
        producer.flush()
        t3 = time.perf_counter()
        self.timings = {"produce_ms": round((t1 - t0) * 1e3, 1),
                        "flush_rows_ms": round((t2 - t1) * 1e3, 1),
                        "progress_ms": round((t3 - t2) * 1e3, 1)}
        self.batches += 1


def _collect(df: Any) -> list[tuple[Any, ...]]:
    """The batch's output rows as tuples, in one Spark job: through Arrow (columnar, no
    per-row pickling), else ``collect``."""
    names = ("kind", "key", "value", "partition", "offset", "reason")
    to_arrow = getattr(df, "toArrow", None)
    if to_arrow is None:
        return [tuple(r[n] for n in names) for r in df.collect()]
    table = to_arrow()
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))
