"""Late direct batches: a call the sender gave up on may still reach the peer afterwards.

When a direct call times out (a slow link, a busy recipient), the sender appends its
messages to txlog unmarked and sends its next ones with a ``log_floor``. If the abandoned
call's request still arrives, later, it must not be handled then: its messages would come
after newer ones of the same sender. Message ids are ``<sender incarnation>-<n>`` with ``n``
rising in send order, so the peer remembers, per sender incarnation, the highest ``n`` it
accepted directly and refuses a batch that starts at or below it (``error_kind`` ``stale``;
those messages come through the log, where they keep their place). Batches of one sender
are checked and accepted one at a time (a lock per sender incarnation)."""

from __future__ import annotations

import threading

__all__ = ["DirectOrder", "sequence_of"]


def sequence_of(message_id: str) -> int | None:
    """The ``n`` of ``<incarnation>-<n>``, or None if the id has another form."""
    _, sep, tail = message_id.rpartition("-")
    if not sep or not tail.isdigit():
        return None
    return int(tail)


class DirectOrder:
    """The highest direct sequence number accepted per sender incarnation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._last: dict[tuple[str, str], int] = {}

    def lock(self, sender: str, incarnation: str) -> threading.Lock:
        """Held while one batch of this sender incarnation is checked and accepted."""
        key = (sender, incarnation)
        with self._lock:
            lk = self._locks.get(key)
            if lk is None:
                lk = self._locks[key] = threading.Lock()
            return lk

    def stale(self, sender: str, incarnation: str, first_id: str) -> bool:
        """Whether a batch starting with ``first_id`` comes after a later one was accepted
        (call under :meth:`lock`)."""
        n = sequence_of(first_id)
        last = self._last.get((sender, incarnation))
        return n is not None and last is not None and n <= last

    def accepted(self, sender: str, incarnation: str, last_id: str) -> None:
        """A batch ending with ``last_id`` was accepted (call under :meth:`lock`)."""
        n = sequence_of(last_id)
        if n is not None:
            key = (sender, incarnation)
            if n > self._last.get(key, -1):
                self._last[key] = n
