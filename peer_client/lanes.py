"""Per-key FIFO lanes: at most one item of a key runs at a time, in the order pushed.

Used for handlers (key = sender: per-sender order) and for the outbox (key = recipient: the
direct batch and the txlog appends of one recipient stay in send order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

__all__ = ["KeyedLanes"]

T = TypeVar("T")


class KeyedLanes(Generic[T]):
    """Queues by key; the caller runs one item per key at a time. Not thread-safe."""

    def __init__(self) -> None:
        self._queues: dict[Hashable, deque[T]] = {}
        #: the busy keys, as a container (``key in busy_keys`` is :meth:`busy` without a
        #: Python frame)
        self.busy_keys: Mapping[Hashable, object] = self._queues
        self.pending = 0

    def push(self, key: Hashable, item: T) -> bool:
        """Queue ``item``; True when the lane was idle, so the caller must start it now
        (the item is then already taken: it is not queued)."""
        queue = self._queues.get(key)
        if queue is None:
            self._queues[key] = deque()
            return True
        queue.append(item)
        self.pending += 1
        return False

    def next(self, key: Hashable) -> T | None:
        """The running item of ``key`` finished: the next one to run, or None (lane idle)."""
        queue = self._queues.get(key)
        if queue is None:
            return None
        if queue:
            self.pending -= 1
            return queue.popleft()
        del self._queues[key]
        return None

    def take(self, key: Hashable, limit: int) -> list[T]:
        """Up to ``limit`` more queued items of ``key`` (batching); the lane stays busy."""
        queue = self._queues.get(key)
        out: list[T] = []
        while queue and len(out) < limit:
            out.append(queue.popleft())
        self.pending -= len(out)
        return out

    def busy(self, key: Hashable) -> bool:
        """Whether an item of ``key`` is running."""
        return key in self._queues

    def drop(self, key: Hashable) -> list[T]:
        """Forget a lane; returns what was still queued."""
        queue = self._queues.pop(key, None) or deque()
        self.pending -= len(queue)
        return list(queue)

    def keys(self) -> list[Hashable]:
        """Busy lanes."""
        return list(self._queues)
