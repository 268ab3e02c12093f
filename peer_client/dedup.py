"""Dedup by message id: a bounded memory of the ids seen most recently."""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["DedupWindow"]


class DedupWindow:
    """Remembers up to ``capacity`` message ids; the oldest is forgotten first.

    An id counts as seen from the moment it is accepted (even while its handler is still
    running), so a duplicate arriving meanwhile is dropped. A failed delivery is forgotten so
    that a redelivery runs the handler again.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        # An OrderedDict, not a dict: evicting a plain dict's first key scans past every
        # slot deleted since its last resize (tens of thousands at a 100k capacity), which
        # made each message cost O(capacity) once the window was full.
        self._ids: OrderedDict[str, None] = OrderedDict()

    def check_and_add(self, message_id: str) -> bool:
        """True if ``message_id`` is new (and now remembered), False if a duplicate."""
        ids = self._ids
        if message_id in ids:
            return False
        ids[message_id] = None
        if len(ids) > self.capacity:
            ids.popitem(last=False)
        return True

    def forget(self, message_id: str) -> None:
        """Drop ``message_id`` so that it counts as new again."""
        self._ids.pop(message_id, None)

    def clear(self) -> None:
        """Forget everything (a crashed process loses its memory)."""
        self._ids.clear()

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)
