"""The entries a replay sent that its peer has not acked yet.

A replay session counts what is in flight to bound it (the next batch goes once at most
``window`` are unacked). The peer acks by count (``{"ack": n}``: the next n entries) or by
position (``{"acked_offset": o}``: every entry up to txlog offset o). :class:`Unacked` keeps
the sent offsets as the lists they were sent in, in txlog order, so sending a chunk and
acking one cost one list operation each, not one per entry.
``tests/property/test_replica_unacked.py`` checks it against a plain queue of offsets.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

__all__ = ["Unacked"]


class Unacked:
    """Sent, not yet acked txlog offsets, oldest first (each chunk's offsets increase, and
    each chunk follows the one before it)."""

    __slots__ = ("_chunks", "_head", "_count")

    def __init__(self) -> None:
        self._chunks: deque[list[int]] = deque()
        self._head = 0   # entries of the first chunk already acked
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def extend(self, offsets: list[int]) -> None:
        """``offsets`` were sent (the list is kept, not copied: do not change it)."""
        if offsets:
            self._chunks.append(offsets)
            self._count += len(offsets)

    def take(self, n: int) -> int:
        """The oldest ``n`` are acked (at most all of them); returns how many were."""
        n = min(max(0, n), self._count)
        left = n
        while left:
            rest = len(self._chunks[0]) - self._head
            if left < rest:
                self._head += left
                break
            self._chunks.popleft()
            self._head = 0
            left -= rest
        self._count -= n
        return n

    def take_through(self, offset: int) -> int:
        """Every entry up to txlog ``offset`` is acked (the oldest ones, while their offset
        is at most ``offset``); returns how many were."""
        n = 0
        while self._chunks:
            chunk = self._chunks[0]
            if chunk[-1] <= offset:
                n += len(chunk) - self._head
                self._chunks.popleft()
                self._head = 0
                continue
            i = bisect_right(chunk, offset, self._head)
            n += i - self._head
            self._head = i
            break
        self._count -= n
        return n
