"""The job's ``foreachBatch`` sink: a batch's rows to queues and deadletter, then progress."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from tidemark.log.exceptions import CodecError, OversizedMessageError, TidemarkError
from tidemark.log.producer import LogProducer
from tidemark.log.queue_state import progress_key, split_queue_key
from tidemark.log.settings import Settings
from tidemark.log.wire import default_codec
from tidemark.spark_streaming.fetch import read_offsets
from tidemark.spark_streaming.transform import (
    DEAD,
    ENTRY,
    LETTER,
    MARK,
    OUTPUT_COLUMNS,
    PURGED,
    REFUSED_ENVIRONMENT,
    REFUSED_SIGNATURE,
    TOMBSTONE,
)

__all__ = ["BatchWriter", "LETTER_SOURCE", "POISON_SOURCE"]

#: ``tidemark.source`` header of a message dead-lettered after too many failed deliveries,
#: and of a txlog record the job could not decode.
LETTER_SOURCE, POISON_SOURCE = "spark-delivery", "spark-queues"

log = logging.getLogger("spark_streaming.job")


class BatchWriter:
    """``foreachBatch`` sink: the batch's rows, flushed; then one QueueProgress per partition.

    The batch's output is net changes (each queue key at most once), so it is collected to
    the driver in one Spark job and written with the project's durable producer (settings
    from :class:`~tidemark.log.settings.Settings` only). ``flush`` raises if Kafka refused anything,
    which fails the batch before its progress is written; the restarted batch rewrites the
    same rows.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer: LogProducer | None = None
        self.batches = 0
        self.dead = 0
        self.letters = 0
        #: records refused by the job's admission, by kind (environment, signature)
        self.refused = {"environment": 0, "signature": 0}
        self.profile = os.environ.get("TIDEMARK_QUEUES_PROFILE")
        self.timings: dict[str, float] = {}

    @property
    def producer(self) -> LogProducer:
        """The driver's producer (created on first use, in the driver process)."""
        if self._producer is None:
            self._producer = LogProducer(self.settings)
        return self._producer

    def reset(self, timeout_s: float = 5.0) -> None:
        """After a failed query: flush what the producer still holds (briefly; a failure is
        only logged, the re-run batch writes the same rows again) and drop it, so that the
        restarted query's batches start with a fresh producer and no stale delivery error."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.flush(timeout_s)
        except TidemarkError as exc:
            log.info("before the restart: %s", exc)

    def counters(self) -> dict[str, int]:
        """What the status file shows: poison records, refused records by kind, letters."""
        return {"poison": self.dead, "refused_environment": self.refused["environment"],
                "refused_signature": self.refused["signature"], "letters": self.letters}

    def _dead(self, key: bytes | None, value: bytes | None, reason: str, part: int,
              offset: int, refused: str = "", topic: str = "txlog") -> None:
        """Copy a record of ``topic`` to deadletter (without its bytes if they are too
        large); ``refused``: the admission refusal's kind, in a header."""
        headers = [("tidemark.reason", reason.encode()[:1000]),
                   ("tidemark.source", POISON_SOURCE.encode()),
                   ("tidemark.topic", self.settings.topic(topic).encode()),
                   ("tidemark.partition", str(part).encode()),
                   ("tidemark.offset", str(offset).encode())]
        if refused:
            headers.append(("tidemark.refused", refused.encode()))
        topic = self.producer.topic("deadletter")
        try:
            self.producer.produce_raw(topic, key, value, headers=headers)
        except OversizedMessageError as exc:
            headers[0] = ("tidemark.reason", f"{reason}; value dropped: {exc}".encode()[:1000])
            self.producer.produce_raw(topic, key, None, headers=headers)

    def _read_sends(self, rows: list[tuple[Any, ...]]) -> dict[tuple[int, int], Any]:
        """The txlog records of Sends from earlier batches that rows need (rare: failures)."""
        wanted = {(r[3], r[4]) for r in rows
                  if r[2] is None and (r[0] == LETTER or (r[0] == ENTRY and r[4] >= 0))}
        return read_offsets(self.settings, "txlog", wanted) if wanted else {}

    def _recount(self, key: bytes, found: Any, part: int, offset: int,
                 count: int) -> bytes | None:
        """A QueueEntry with a new delivery count, from its Send read back from txlog."""
        if found is None:
            log.warning("txlog %d@%d (the Send of a queue entry) is gone; its delivery count"
                        " %d is not published", offset, part, count)
            return None
        try:
            rec = default_codec().decode(found[1]).record
        except CodecError as exc:
            log.warning("txlog %d@%d does not decode (%s)", offset, part, exc)
            return None
        peer, mid = split_queue_key(key.decode())
        return default_codec().encode("QueueEntry", {
            "peer": peer, "message_id": mid, "sender": rec["sender"],
            "message_type": rec["message_type"], "payload": rec["payload"],
            "timestamp_ms": rec["timestamp_ms"], "txlog_partition": part,
            "txlog_offset": offset, "delivery_count": count})

    def _letter(self, qkey: bytes, value: bytes | None, reason: str, part: int, offset: int,
                count: int) -> None:
        """The original Send to deadletter: key = peer, headers say why and from where."""
        peer, mid = split_queue_key(qkey.decode())
        headers = [("tidemark.reason", reason.encode()[:1000]),
                   ("tidemark.source", LETTER_SOURCE.encode()),
                   ("tidemark.topic", self.settings.topic("txlog").encode()),
                   ("tidemark.partition", str(part).encode()),
                   ("tidemark.offset", str(offset).encode()),
                   ("tidemark.delivery_count", str(count).encode()),
                   ("tidemark.peer", peer.encode()),
                   ("tidemark.message_id", mid.encode())]
        if value is None:
            log.warning("txlog %d@%d (the Send of dead-lettered %s) is gone", offset, part, mid)
        self.producer.produce_raw(self.producer.topic("deadletter"), peer.encode(), value,
                                  headers=headers)
        self.letters += 1

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
        """Write one batch's output rows
        (:data:`~tidemark.spark_streaming.transform.OUTPUT_COLUMNS`), then its progress records."""
        producer = self.producer
        queues, deadletter = producer.topic("queues"), producer.topic("deadletter")
        produce = producer.produce_raw
        top: dict[int, int] = {}
        dead = 0
        refused = {"environment": 0, "signature": 0}
        t0 = time.perf_counter()
        sends = self._read_sends(rows)
        for kind, key, value, part, offset, reason, count in rows:
            if kind == ENTRY and value is None:
                value = self._recount(key, sends.get((part, offset)), part, offset, count)
                if value is None:
                    continue
            if kind in (ENTRY, TOMBSTONE, PURGED):
                try:
                    produce(queues, key, value, partition=part)
                except OversizedMessageError as exc:  # a Send near the size limit
                    self._dead(key, None, f"queue entry not written: {exc}", part, offset)
                    dead += 1
            elif kind == LETTER:
                if value is None:
                    value = (sends.get((part, offset)) or (None, None))[1]
                self._letter(key, value, reason or "", part, offset, count)
            elif kind == MARK:
                top[part] = max(top.get(part, -1), offset)
            elif kind == DEAD:
                self._dead(key, value, reason or "", part, offset, topic=_source(count))
                dead += 1
            elif kind in (REFUSED_ENVIRONMENT, REFUSED_SIGNATURE):
                why = kind.split("-", 1)[1]
                self._dead(key, value, f"refused ({why}): {reason or ''}", part, offset, why,
                           _source(count))
                refused[why] += 1
        t1 = time.perf_counter()
        producer.flush()  # every row of the batch is acknowledged before its progress
        t2 = time.perf_counter()
        if dead:
            self.dead += dead
            log.warning("batch %d: %d poison record(s) sent to %s", batch_id, dead, deadletter)
        for why, n in refused.items():
            if n:
                self.refused[why] += n
                log.warning("batch %d: %d record(s) refused (%s) sent to %s", batch_id, n, why,
                            deadletter)
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


def _source(count: int) -> str:
    """The topic of a dead or refused row (its ``count`` is 1 for a ``purges`` record)."""
    return "purges" if count == 1 else "txlog"


def _collect(df: Any) -> list[tuple[Any, ...]]:
    """The batch's output rows as tuples, in one Spark job: through Arrow (columnar, no
    per-row pickling), else ``collect``."""
    names = OUTPUT_COLUMNS
    to_arrow = getattr(df, "toArrow", None)
    if to_arrow is None:
        return [tuple(r[n] for n in names) for r in df.collect()]
    table = to_arrow()
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))
