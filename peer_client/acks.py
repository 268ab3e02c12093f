"""Acks of handled messages, and the failure record of a handler that raised.

:class:`AckBatcher` decides, with no I/O: an ack is added after its handler returns, and a
batch is due when it holds ``max_batch`` acks or when its oldest ack has waited
``linger_ms``; :meth:`AckBatcher.drain` hands over the rest at stop. Every added ack comes
out of exactly one returned batch, in the order added. :func:`chunks` cuts a long run of ids
into AckBatch records that stay far below Kafka's record limit. :class:`Acker` is the peer's
I/O around them: it appends each batch that became due as one AckBatch record, and a
DeliveryFailed record per failed persistent message.

**Range acks.** A message whose txlog position the peer knows (a replayed one: its queue
entry names the Send's partition and offset) is acked in a batch of its own, appended with
the range it spans (``txlog_partition``, the lowest and the highest offset of its ids'
Sends). The record still lists the ids, so the queues job and a peer's replay tail read it
as the Acks of those ids, as before; replicas index it by one key for the range instead of
one per id, and GC releases a Send the range covers when its id is listed
(:mod:`tidemark.replica.ack_ranges`). Live messages (no txlog position yet) are acked by id.
:class:`RangeAcks` batches them as :class:`AckBatcher` does ids, kept per partition as
columns (offsets, ids), so a replayed chunk is added with a slice per column, not a tuple
per message; ``tests/property/test_peer_range_acks.py`` checks it against a list of
``(partition, offset, id)`` cut the way it was before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from tidemark.peer_client.columns import Columns
from tidemark.peer_client.ports import LogPort
from tidemark.peer_client.records import Envelope

__all__ = ["AckBatcher", "RangeAcks", "RangeRun", "Acker", "chunks", "bounds", "MAX_BATCH_BYTES",
           "TERM"]

#: The failure kind of a message its handler terminated (``ctx.term``): a terminal
#: DeliveryFailed, which the queues dead-letter at once.
TERM = "term"

log = logging.getLogger("peer_client")
#: An AckBatch's ids stay below about this many characters (4 bytes each at most in
#: UTF-8: below Kafka's default 1 MiB record limit).
MAX_BATCH_BYTES = 128 * 1024

T = TypeVar("T")


class AckBatcher(Generic[T]):
    """Collects acks; returns full or lingering batches to append."""

    def __init__(self, max_batch: int, linger_ms: int) -> None:
        if max_batch <= 0 or linger_ms < 0:
            raise ValueError("max_batch must be positive and linger_ms not negative")
        self.max_batch = max_batch
        self.linger_ms = linger_ms
        self._items: list[T] = []
        self._first_ms: int | None = None

    def add(self, item: T, now_ms: int) -> list[T] | None:
        """Add one ack; returns a batch to append when the count is reached."""
        if not self._items:
            self._first_ms = now_ms
        self._items.append(item)
        if len(self._items) >= self.max_batch:
            return self.drain()
        return None

    def add_many(self, items: list[T], now_ms: int) -> list[list[T]]:
        """:meth:`add` each of ``items`` in order; returns the batches that became due."""
        out: list[list[T]] = []
        pending, room = self._items, self.max_batch - len(self._items)
        if items and not pending:
            self._first_ms = now_ms
        while len(items) >= room:
            pending.extend(items[:room])
            items = items[room:]
            out.append(self.drain())
            pending, room = self._items, self.max_batch
            if items:
                self._first_ms = now_ms
        pending.extend(items)
        return out

    def due(self, now_ms: int) -> list[T] | None:
        """The pending batch if its oldest ack has waited ``linger_ms``, else None."""
        if self._items and self._first_ms is not None \
                and now_ms - self._first_ms >= self.linger_ms:
            return self.drain()
        return None

    def drain(self) -> list[T]:
        """Everything pending (possibly empty)."""
        out, self._items, self._first_ms = self._items, [], None
        return out

    @property
    def next_due_ms(self) -> int | None:
        """When the pending batch lingers out, or None when nothing is pending."""
        return None if self._first_ms is None else self._first_ms + self.linger_ms

    def __len__(self) -> int:
        return len(self._items)


def chunks(ids: Sequence[str], max_ids: int,
           max_bytes: int = MAX_BATCH_BYTES) -> Iterator[Sequence[str]]:
    """``ids`` in order, cut into runs of at most ``max_ids`` ids and about ``max_bytes``."""
    for start, end in bounds(ids, max_ids, max_bytes):
        yield ids[start:end]


def bounds(ids: Sequence[str], max_ids: int,
           max_bytes: int = MAX_BATCH_BYTES) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run :func:`chunks` cuts ``ids`` into."""
    start, size = 0, 0
    for i, mid in enumerate(ids):
        n = len(mid) + 2
        if i > start and (i - start >= max_ids or size + n > max_bytes):
            yield start, i
            start, size = i, 0
        size += n
    if start < len(ids):
        yield start, len(ids)


#: The ids of one range ack and its range: ``(partition, lowest offset, highest offset)``.
RangeRun = tuple[list[str], tuple[int, int, int]]


class RangeAcks:
    """Pending range acks: the acks of messages whose txlog position is known (replayed
    ones), per txlog partition as two columns, offsets and ids, in the order acked (a
    replayed chunk is added with one slice per column, not a tuple per message). Once
    ``max_batch`` are pending, or the oldest has waited ``linger_ms``, everything pending is
    cut into :data:`RangeRun` s: per partition, in order, as :func:`bounds` cuts ids, each
    with its partition and lowest and highest offset."""

    def __init__(self, max_batch: int, linger_ms: int,
                 max_bytes: int = MAX_BATCH_BYTES) -> None:
        if max_batch <= 0 or linger_ms < 0:
            raise ValueError("max_batch must be positive and linger_ms not negative")
        self.max_batch, self.linger_ms, self.max_bytes = max_batch, linger_ms, max_bytes
        self._parts: dict[int, tuple[list[int], list[str]]] = {}
        self._count = 0
        self._first_ms: int | None = None

    def __len__(self) -> int:
        return self._count

    @property
    def next_due_ms(self) -> int | None:
        """When the pending acks linger out, or None when nothing is pending."""
        return None if self._first_ms is None else self._first_ms + self.linger_ms

    def add(self, partition: int, offsets: Sequence[int], ids: Sequence[str],
            now_ms: int) -> list[RangeRun]:
        """The acks of ``ids`` at txlog ``offsets`` of ``partition`` (same length, in the
        order acked); returns the runs of each batch that became full (``max_batch``
        pending: that many are cut, the rest stay)."""
        n, i = len(ids), 0
        if n and not self._count:
            self._first_ms = now_ms
        out: list[RangeRun] = []
        while n - i >= self.max_batch - self._count:
            room = self.max_batch - self._count
            self._put(partition, offsets[i:i + room], ids[i:i + room])
            i += room
            out += self.drain()
            if i < n:
                self._first_ms = now_ms
        if i < n:
            self._put(partition, offsets[i:], ids[i:])
        return out

    def _put(self, partition: int, offsets: Sequence[int], ids: Sequence[str]) -> None:
        part = self._parts.get(partition)
        if part is None:
            self._parts[partition] = (list(offsets), list(ids))
        else:
            part[0].extend(offsets)
            part[1].extend(ids)
        self._count += len(ids)

    def due(self, now_ms: int) -> list[RangeRun]:
        """Everything pending, as runs, if the oldest ack has waited ``linger_ms``."""
        if self._first_ms is not None and now_ms - self._first_ms >= self.linger_ms:
            return self.drain()
        return []

    def drain(self) -> list[RangeRun]:
        """Everything pending, as runs (possibly none)."""
        parts, self._parts, self._count, self._first_ms = self._parts, {}, 0, None
        out: list[RangeRun] = []
        for k, (offsets, ids) in parts.items():
            if len(ids) <= self.max_batch and \
                    sum(map(len, ids)) + 2 * len(ids) <= self.max_bytes:
                out.append((ids, (k, min(offsets), max(offsets))))  # one run: no cut to find
                continue
            for start, end in bounds(ids, self.max_batch, self.max_bytes):
                run = offsets[start:end]
                out.append((ids[start:end], (k, min(run), max(run))))
        return out


class Acker:
    """The acks and failure records of peer ``peer_id``, appended through ``log_port``:
    ``encode_acks(ids, now_ms, span=None)`` encodes one AckBatch (signed, when the peer
    signs), ``encode_record`` the DeliveryFailed, which ``seal`` signs (None: unsigned,
    insecure). ``ranges`` batches the acks of messages with a txlog position (range acks);
    None: every ack by id."""

    def __init__(self, peer_id: str, environment: str, batcher: AckBatcher[str], *,
                 log_port: LogPort, encode_acks: Callable[..., bytes],
                 encode_record: Callable[[str, dict[str, Any]], bytes],
                 clock_ms: Callable[[], int], stats: Any,
                 seal: Callable[[bytes], bytes] | None = None,
                 ranges: RangeAcks | None = None) -> None:
        self.peer_id, self.environment, self.batcher = peer_id, environment, batcher
        self.ranges = ranges
        self.seal = seal  # signs the DeliveryFailed records (secure mode)
        self.log_port, self.encode_acks, self.encode_record = log_port, encode_acks, encode_record
        self.clock_ms, self.stats = clock_ms, stats
        self._lock = threading.Lock()
        self._delivered_cb = self._delivered  # bound once, shared by every append

    def ack(self, env: Envelope) -> None:
        """Queue the ack of handled ``env`` (if persistent); see :meth:`ack_many`."""
        self.ack_many((env,))

    def ack_many(self, envs: Sequence[Envelope]) -> None:
        """Queue the acks of handled ``envs`` (persistent ones) under one lock; append the
        batches that became due, each as one AckBatch record (a range ack for the messages
        with a txlog position)."""
        ids: list[str] = []
        placed: list[tuple[int, list[int], list[str]]] = []  # runs of one partition, in order
        if self.ranges is None:
            ids = [env.message_id for env in envs if env.persistent]
        else:
            for env in envs:
                if env.persistent:
                    k = env.txlog_partition
                    if env.txlog_offset >= 0 and k >= 0:
                        if not placed or placed[-1][0] != k:
                            placed.append((k, [], []))
                        placed[-1][1].append(env.txlog_offset)
                        placed[-1][2].append(env.message_id)
                    else:
                        ids.append(env.message_id)
        if not ids and not placed:
            return
        now = self.clock_ms()
        ranged: list[RangeRun] = []
        with self._lock:
            batches = self.batcher.add_many(ids, now) if ids else []
            if self.ranges is not None:
                for k, offsets, run in placed:
                    ranged += self.ranges.add(k, offsets, run, now)
        for batch in batches:
            self._append(batch)
        self._append_ranged(ranged)

    def ack_columns(self, cols: Columns, positions: Sequence[int]) -> None:
        """:meth:`ack_many` of the messages of a replayed chunk at ``positions`` (every one
        persistent, with its txlog position), without an Envelope each."""
        if not positions:
            return
        whole = len(positions) == len(cols)
        ids = cols.ids if whole else [cols.ids[k] for k in positions]
        now = self.clock_ms()
        if self.ranges is None:
            with self._lock:
                batches = self.batcher.add_many(ids, now)
            for batch in batches:
                self._append(batch)
            return
        offsets = cols.offsets if whole else [cols.offsets[k] for k in positions]
        with self._lock:
            ranged = self.ranges.add(cols.partition, offsets, ids, now)
        self._append_ranged(ranged)

    def append_due(self, now_ms: int) -> None:
        """Append the pending batches that have lingered out (housekeeping)."""
        with self._lock:
            batch = self.batcher.due(now_ms)
            runs = self.ranges.due(now_ms) if self.ranges is not None else []
        if batch:
            self._append(batch)
        self._append_ranged(runs)

    def flush(self) -> int:
        """Append every pending ack now; returns how many."""
        with self._lock:
            batch = self.batcher.drain()
            runs = self.ranges.drain() if self.ranges is not None else []
        self._append(batch)
        return len(batch) + self._append_ranged(runs)

    def drop_pending(self) -> int:
        """Forget unappended acks (a crash in the test double)."""
        with self._lock:
            ranged = 0
            if self.ranges is not None:
                ranged = len(self.ranges)
                self.ranges.drain()
            return len(self.batcher.drain()) + ranged

    def record_failure(self, env: Envelope, reason: str, kind: str) -> None:
        """A handler raised on ``env``: count it; a persistent one gets a DeliveryFailed
        (``kind`` :data:`TERM`: a terminal one, which dead-letters it at once)."""
        self.stats["failed_deliveries"] += 1
        if not env.persistent:
            return
        value = self.encode_record("DeliveryFailed", {
            "message_id": env.message_id, "peer": self.peer_id, "environment": self.environment,
            "sender": env.sender, "message_type": env.message_type, "reason": reason[:1000],
            "timestamp_ms": self.clock_ms(), "terminal": kind == TERM,
            "signer": b"", "signature": b""})
        if self.seal is not None:
            value = self.seal(value)
        self.log_port.append(self.peer_id, value, self._delivered_cb)

    def _append(self, batch: Sequence[str]) -> None:
        """Append the acks of ``batch`` (message ids) as AckBatch records."""
        if not batch:
            return
        now = self.clock_ms()
        for ids in chunks(batch, self.batcher.max_batch):
            self.log_port.append(self.peer_id, self.encode_acks(ids, now), self._delivered_cb)
        self.stats["acks"] += len(batch)

    def _append_ranged(self, runs: list[RangeRun]) -> int:
        """Append each run as a range ack; returns how many acks they held."""
        if not runs:
            return 0
        now, n = self.clock_ms(), 0
        for ids, span in runs:
            self.log_port.append(self.peer_id, self.encode_acks(ids, now, span),
                                 self._delivered_cb)
            n += len(ids)
        self.stats["acks"] += n
        return n

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.stats["ack_errors"] += 1
            log.warning("an ack of peer %s was not acknowledged by Kafka: %s (the message"
                        " will be delivered again)", self.peer_id, err)
