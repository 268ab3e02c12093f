"""A ``Watch`` stream's pacing (:mod:`tidemark.replica.ends`): a quiet stream answers a move at
once; a move that comes within ``watch_gap_ms`` of the last message waits out the rest of
the gap and the message then carries every move since."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

from tidemark.replica.ends import Ends, watch_hold


def test_hold_is_the_rest_of_the_gap() -> None:
    assert abs(watch_hold(now=10.0, last_sent=9.99, gap=0.02) - 0.01) < 1e-9
    assert watch_hold(now=10.0, last_sent=9.0, gap=0.02) == 0.0  # quiet: send now
    assert watch_hold(now=10.0, last_sent=10.0, gap=0.0) == 0.0  # no gap: every move


class _Stopping(threading.Event):
    """The node's stop event; a hold (``wait``) records its length and runs ``during``, what
    the node applies meanwhile, instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.holds: list[float] = []
        self.during: Any = None

    def wait(self, timeout: float | None = None) -> bool:
        self.holds.append(timeout or 0.0)
        if self.during is not None:
            self.during()
        return False


class _Ends(Ends):
    """Ends over a dict of partition ends (the store and cut are not what is tested)."""

    def __init__(self, gap_s: float) -> None:
        self.now = {0: [1, 0]}
        super().__init__("n1", None, None, SimpleNamespace(partitions=[0]),  # type: ignore[arg-type]
                         threading.Condition(), _Stopping(), gap_s)

    def ends(self, partitions: list[int]) -> dict[str, list[int]]:
        return {str(k): list(self.now[k]) for k in partitions}


def _stream(ends: _Ends) -> Any:
    return ends.watch(iter([b"{}"]), SimpleNamespace(is_active=lambda: True))  # type: ignore[arg-type]


def test_a_move_inside_the_gap_waits_and_carries_what_moved_meanwhile() -> None:
    ends = _Ends(gap_s=60.0)  # long: the second move always falls inside it
    stopping: _Stopping = ends.stopping  # type: ignore[assignment]
    stream = _stream(ends)
    assert json.loads(next(stream))["ends"] == {"0": [1, 0]}  # at once, nothing held
    assert stopping.holds == []
    ends.now[0] = [5, 0]
    stopping.during = lambda: ends.now.__setitem__(0, [7, 3])  # applied during the hold
    assert json.loads(next(stream))["ends"] == {"0": [7, 3]}
    assert len(stopping.holds) == 1 and 59.0 < stopping.holds[0] <= 60.0


def test_without_a_gap_each_move_goes_at_once() -> None:
    ends = _Ends(gap_s=0.0)
    stopping: _Stopping = ends.stopping  # type: ignore[assignment]
    stream = _stream(ends)
    next(stream)
    for applied in (5, 7, 9):
        ends.now[0] = [applied, 0]
        assert json.loads(next(stream))["ends"] == {"0": [applied, 0]}
    assert stopping.holds == []
