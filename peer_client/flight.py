"""Flight size: at most N sends unconfirmed at their requested durability level.

:class:`FlightWindow` is the pure count; :class:`FlightControl` adds blocking (the default)
or failing with :class:`FlightSizeExceededError` naming the limit and the current count.
"""

from __future__ import annotations

import threading
import time

from tidemark.peer_client.exceptions import FlightSizeExceededError

__all__ = ["FlightWindow", "FlightControl", "BLOCK", "RAISE"]

BLOCK, RAISE = "block", "raise"


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


class FlightControl:
    """Thread-safe :class:`FlightWindow` that blocks or raises when full."""

    def __init__(self, limit: int, mode: str = BLOCK) -> None:
        if mode not in (BLOCK, RAISE):
            raise ValueError(f"flight mode must be {BLOCK!r} or {RAISE!r}, got {mode!r}")
        self.window = FlightWindow(limit)
        self.mode = mode
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0

    def acquire(self, timeout: float | None = None) -> None:
        """Take a slot; block until one frees (or ``timeout``), or raise in fail mode."""
        w = self.window
        with self._lock:
            if w.in_flight < w.limit:
                w.in_flight += 1
                return
            if self.mode == RAISE:
                raise FlightSizeExceededError(self.window.limit, self.window.in_flight)
            deadline = None if timeout is None else time.monotonic() + timeout
            self._waiting += 1
            try:
                while not w.try_acquire():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise FlightSizeExceededError(w.limit, w.in_flight)
                    self._cond.wait(left)
            finally:
                self._waiting -= 1

    def release(self) -> None:
        """Give a slot back and wake a blocked sender (or one waiting for empty)."""
        with self._lock:
            self.window.release()
            if self._waiting:
                self._cond.notify_all()

    def wait_empty(self, timeout: float | None = None) -> bool:
        """Wait until nothing is in flight; False at the deadline."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            try:
                while self.window.in_flight:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left if left is not None else 1.0)
            finally:
                self._waiting -= 1
            return True

    @property
    def in_flight(self) -> int:
        """Sends currently unconfirmed."""
        return self.window.in_flight

    @property
    def limit(self) -> int:
        """The flight size."""
        return self.window.limit
