"""Flight size: at most N sends unconfirmed at their requested durability level.

:class:`FlightWindow` is the pure count (the reference model); :class:`FlightControl` is the
thread-safe window the peer uses, which blocks (the default) or fails with
:class:`FlightSizeExceededError` naming the limit and the current count.

The send path takes a slot per message and a Kafka callback gives it back, so neither side
takes a lock: slots taken and given back are two :func:`itertools.count` counters, whose
``next`` is atomic under the interpreter lock. A sender compares its ticket with a floor of
the slots given back (a value read exactly, under the lock, only when the window looks
full); a release wakes waiters only when someone waits.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tidemark.peer_client.exceptions import FlightSizeExceededError

__all__ = ["FlightWindow", "FlightControl", "BLOCK", "RAISE"]

BLOCK, RAISE = "block", "raise"

#: How long a blocked sender or a flush sleeps at most before looking again (a safety net:
#: releases wake them).
_RECHECK_S = 0.1


class FlightWindow:
    """How many sends are in flight, never above ``limit`` nor below zero."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError("flight size must be positive")
        self.limit = limit
        self.in_flight = 0

    def try_acquire(self) -> bool:
        """Take a slot if one is free."""
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def release(self) -> None:
        """Give a slot back (a send was confirmed, or failed)."""
        if self.in_flight <= 0:
            raise RuntimeError("flight window released more often than acquired")
        self.in_flight -= 1


def _count(counter: Any) -> int:
    """The next value ``counter`` (an :func:`itertools.count`) would return, without taking
    it: how many were taken so far."""
    return int(repr(counter)[6:-1])


class FlightControl:
    """The peer's flight window: thread-safe, lock-free while it is not full."""

    def __init__(self, limit: int, mode: str = BLOCK) -> None:
        if mode not in (BLOCK, RAISE):
            raise ValueError(f"flight mode must be {BLOCK!r} or {RAISE!r}, got {mode!r}")
        if limit <= 0:
            raise ValueError("flight size must be positive")
        self.mode = mode
        self._limit = limit
        self._taken = itertools.count()  # next(): a ticket, the slots taken before it
        self._given = itertools.count()  # next(): one slot given back
        #: a lower bound of the slots given back, raised under the lock from the exact count
        self._floor = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0

    def acquire(self, timeout: float | None = None) -> None:
        """Take a slot; block until one frees (or ``timeout``), or raise in fail mode."""
        ticket = next(self._taken)
        if ticket - self._floor < self._limit:
            return
        self._acquire_slow(ticket, timeout)

    def acquire_many(self, n: int, timeout: float | None = None) -> None:
        """Take ``n`` slots at once (``1 <= n <= limit``), as :meth:`acquire` does one."""
        if not 1 <= n <= self._limit:
            raise ValueError(f"can take 1 to {self._limit} slots at once, not {n}")
        # islice drained in C: the n tickets are consecutive even with other senders
        last = deque(itertools.islice(self._taken, n), maxlen=1)[0]
        if last - self._floor < self._limit:
            return
        self._acquire_slow(last, timeout, n)

    def _acquire_slow(self, ticket: int, timeout: float | None, n: int = 1) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._waiting += 1
            try:
                while True:
                    self._floor = _count(self._given)
                    if ticket - self._floor < self._limit:
                        return
                    left = None if deadline is None else deadline - time.monotonic()
                    if self.mode == RAISE or (left is not None and left <= 0):
                        # the tickets are not used: their slots go back
                        deque(itertools.islice(self._given, n), maxlen=0)
                        raise FlightSizeExceededError(self._limit, ticket + 1 - n - self._floor)
                    self._cond.wait(_RECHECK_S if left is None else min(left, _RECHECK_S))
            finally:
                self._waiting -= 1

    def release(self) -> None:
        """Give a slot back and wake a blocked sender (or one waiting for empty)."""
        next(self._given)
        if self._waiting:
            with self._lock:
                self._cond.notify_all()

    def releaser(self, on_error: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        """A Kafka delivery callback that gives its slot back, and calls ``on_error(err,
        msg)`` first when the record was refused: one Python call per record."""
        given, lock, cond = self._given, self._lock, self._cond

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                on_error(err, msg)
            next(given)
            if self._waiting:
                with lock:
                    cond.notify_all()
        return delivered

    def wait_empty(self, timeout: float | None = None) -> bool:
        """Wait until nothing is in flight; False at the deadline."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            try:
                while self.in_flight > 0:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(_RECHECK_S if left is None else min(left, _RECHECK_S))
            finally:
                self._waiting -= 1
            return True

    @property
    def in_flight(self) -> int:
        """Sends currently unconfirmed."""
        given = _count(self._given)  # given first: a slot is taken before it is given back
        return _count(self._taken) - given

    @property
    def limit(self) -> int:
        """The flight size."""
        return self._limit
