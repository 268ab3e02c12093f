"""The universal stable cut (UST) as pure functions over gossiped views.

For every (topic, partition) ``tp`` the cut is the minimum, over the replicas that count in
the current epoch, of their base end — never below the previous cut (it only rises). A
replica with no view yet leaves ``tp`` at its previous value, so the cut never covers an
offset some counting replica may lack. Joining (still backfilling) replicas do not count;
they are promoted only once their base reaches the cut, which keeps ``max(previous, ...)``
honest across epochs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReplicaView", "stable_cut", "cut_holders", "HoldTracker", "stable_cut_ms"]


@dataclass(frozen=True)
class ReplicaView:
    """What one node last gossiped: per tp its base ``(floor, base_end)`` and GC cut."""

    node_id: str
    epoch: int = 0
    base: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    gc_cut: Mapping[str, int] = field(default_factory=dict)
    caught_up_ms: Mapping[str, int] = field(default_factory=dict)
    log_end: Mapping[str, int] = field(default_factory=dict)


def stable_cut(owners: Mapping[str, Sequence[str]], views: Mapping[str, ReplicaView],
               previous: Mapping[str, int]) -> dict[str, int]:
    """``{tp: offset}``: min base end over ``owners[tp]`` (counting replicas), never lower
    than ``previous[tp]``; unchanged where a counting replica has not reported ``tp``."""
    out: dict[str, int] = {}
    for tp, replicas in owners.items():
        prev = previous.get(tp, 0)
        ends: list[int] = []
        for node in replicas:
            view = views.get(node)
            if view is None or tp not in view.base:
                ends = []
                break
            ends.append(view.base[tp][1])
        out[tp] = max(prev, min(ends)) if ends and replicas else prev
    return out


def stable_cut_ms(owners: Mapping[str, Sequence[str]], views: Mapping[str, ReplicaView],
                  previous: int) -> int:
    """A scalar for people: the minimum, over tps and counting replicas, of the wall time at
    which that replica last had applied everything Kafka held; never below ``previous``."""
    times = []
    for tp, replicas in owners.items():
        for node in replicas:
            view = views.get(node)
            if view is None or tp not in view.caught_up_ms:
                return previous
            times.append(view.caught_up_ms[tp])
    return max(previous, min(times)) if times else previous


def cut_holders(owners: Mapping[str, Sequence[str]], views: Mapping[str, ReplicaView],
                log_end: Mapping[str, int]) -> dict[str, set[str]]:
    """``{node: {tp, ...}}``: replicas whose base end is the minimum for a tp whose cut is
    below the log end (or that never reported it) — the nodes holding the cut back."""
    held: dict[str, set[str]] = {}
    for tp, replicas in owners.items():
        ends = {}
        for node in replicas:
            view = views.get(node)
            ends[node] = view.base[tp][1] if view is not None and tp in view.base else -1
        if not ends:
            continue
        low = min(ends.values())
        if low >= log_end.get(tp, 0) and low >= 0:
            continue
        for node, end in ends.items():
            if end == low:
                held.setdefault(node, set()).add(tp)
    return held


class HoldTracker:
    """Remembers since when each node has been holding the cut back."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}

    def update(self, holders: Iterable[str], now: float) -> dict[str, Any] | None:
        """Feed the current holders; returns ``{"node", "seconds"}`` for the longest one."""
        current = set(holders)
        self.since = {n: self.since.get(n, now) for n in current}
        if not self.since:
            return None
        node = min(self.since, key=lambda n: (self.since[n], n))
        return {"node": node, "seconds": round(now - self.since[node], 3)}
