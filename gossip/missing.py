"""Missing data (the disaster case) and backfill sources, as pure functions over maps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidemark.gossip.interval_map import IntervalMap

__all__ = ["intersect", "unrecoverable", "find_source", "without_losses"]


def intersect(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Intersection of two sorted lists of disjoint half-open ranges."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def unrecoverable(holders: Sequence[str], maps: Mapping[str, IntervalMap],
                  log_start: int) -> list[tuple[int, int]]:
    """Ranges below the Kafka log start that no holder of the tp (counting or joining)
    has applied. Empty unless every holder has reported a map."""
    if not holders or any(h not in maps for h in holders):
        return []
    common: list[tuple[int, int]] | None = None
    for h in holders:
        gaps = maps[h].gaps(max(log_start, maps[h].end))
        common = gaps if common is None else intersect(common, gaps)
    return [(a, min(b, log_start)) for a, b in (common or []) if a < log_start]


def find_source(start: int, end: int, maps: Mapping[str, IntervalMap]
                ) -> tuple[str, int] | None:
    """A node whose map holds ``start`` and how far its range goes (``<= end``)."""
    best: tuple[str, int] | None = None
    for node, m in sorted(maps.items()):
        if not m.contains(start):
            continue
        reach = m.base_end if start < m.base_end else next(
            b for a, b in m.detached if a <= start < b)
        reach = min(reach, end)
        if best is None or reach > best[1]:
            best = (node, reach)
    return best


def without_losses(m: IntervalMap, lost: Sequence[tuple[int, int]]) -> IntervalMap:
    """``m`` less the ranges its node spliced as lost: what that node really holds. A range
    another replica spliced is neither a backfill source nor proof that the data exists, so
    each replica detects (and records) a loss for its own map."""
    if not lost:
        return m
    held: list[tuple[int, int]] = []
    for a, b in m.ranges():
        cuts = [(max(a, x), min(b, y)) for x, y in sorted(lost) if x < b and y > a]
        cursor = a
        for x, y in cuts:
            if x > cursor:
                held.append((cursor, x))
            cursor = max(cursor, y)
        if cursor < b:
            held.append((cursor, b))
    base_end = 0
    if held and held[0][0] == 0:
        base_end = held.pop(0)[1]
    return IntervalMap(base_end, min(m.floor, base_end), [[a, b] for a, b in held])
