"""Calls run after a delay: what a nak waits on (a daemon thread's timer on a real peer; the
test double schedules on its bus's clock instead)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["Cancellable", "thread_timer"]


class Cancellable(Protocol):
    """What :attr:`Inbox.schedule` returns: the scheduled call, which ``cancel`` drops."""

    def cancel(self) -> None: ...


def thread_timer(delay_s: float, fn: Callable[[], None]) -> Cancellable:
    """Run ``fn`` on a daemon thread after ``delay_s`` seconds."""
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()
    return timer
