"""The GC point as pure functions.

A node's local GC cut is its view of the UST lowered to the barrier of every pin (a replay
session still running). The cluster GC point is, per tp, the minimum of the local GC cuts
gossiped by every replica owning tp; it only rises and never exceeds the cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = ["local_gc_cut", "cluster_gc_point", "clamp_pin"]


def local_gc_cut(ust: Mapping[str, int], pins: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """``ust`` lowered to each pin's barrier."""
    out = dict(ust)
    for pin in pins:
        for tp, offset in pin.items():
            if tp in out:
                out[tp] = min(out[tp], offset)
    return out


def cluster_gc_point(owners: Mapping[str, Sequence[str]],
                     gc_cuts: Mapping[str, Mapping[str, int]], ust: Mapping[str, int],
                     previous: Mapping[str, int]) -> dict[str, int]:
    """Per tp: min over ``owners[tp]`` of their gossiped local GC cut, capped by ``ust``,
    never below ``previous``; unchanged where some owner has not reported."""
    out: dict[str, int] = {}
    for tp, replicas in owners.items():
        prev = previous.get(tp, 0)
        cuts: list[int] = []
        for node in replicas:
            cut = gc_cuts.get(node, {}).get(tp)
            if cut is None:
                cuts = []
                break
            cuts.append(cut)
        if cuts and replicas:
            out[tp] = max(prev, min(min(cuts), ust.get(tp, 0)))
        else:
            out[tp] = prev
    return out


def clamp_pin(barrier: Mapping[str, int], gc_point: Mapping[str, int]) -> dict[str, int]:
    """A pin cannot hold back what GC already released: raise it to the GC point."""
    return {tp: max(o, gc_point.get(tp, 0)) for tp, o in barrier.items()}
