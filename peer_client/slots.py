"""The inbox's bound on accepted-but-unfinished messages."""

from __future__ import annotations

import threading

__all__ = ["Slots"]


class Slots:
    """The inbox ``limit``: how many accepted messages may be unfinished. Cheaper than a
    ``BoundedSemaphore`` (one plain lock per call) and takes many slots at once."""

    __slots__ = ("free", "_cond", "_waiters")

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._cond = threading.Condition(threading.Lock())
        self._waiters = 0

    def take(self, n: int = 1, blocking: bool = True) -> int:
        """Up to ``n`` free slots (at least one, waiting for it, if ``blocking``; else
        possibly none)."""
        with self._cond:
            while self.free <= 0:
                if not blocking:
                    return 0
                self._waiters += 1
                try:
                    self._cond.wait()
                finally:
                    self._waiters -= 1
            k = n if n < self.free else self.free
            self.free -= k
            return k

    def force(self, n: int) -> None:
        """Take ``n`` slots without waiting (free may go below zero): for messages that must
        be queued now, in order, such as the held-back ones a phase change releases."""
        with self._cond:
            self.free -= n

    def give(self, n: int = 1) -> None:
        """``n`` messages finished (or slots taken were not used)."""
        with self._cond:
            self.free += n
            if self._waiters:
                self._cond.notify(n)
