"""Ack batching: pure decisions, no I/O. The peer appends what these return.

An ack is added after its handler returns. A batch is due when it holds ``max_batch`` acks,
or when its oldest ack has waited ``linger_ms``; :meth:`AckBatcher.drain` hands over the rest
at stop. Every added ack comes out of exactly one returned batch, in the order added.
:func:`chunks` cuts a long run of ids into AckBatch records that stay far below Kafka's
record limit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

__all__ = ["AckBatcher", "chunks", "MAX_BATCH_BYTES"]

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
    start, size = 0, 0
    for i, mid in enumerate(ids):
        n = len(mid) + 2
        if i > start and (i - start >= max_ids or size + n > max_bytes):
            yield ids[start:i]
            start, size = i, 0
        size += n
    if start < len(ids):
        yield ids[start:]
