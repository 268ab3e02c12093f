"""Missing data (the disaster case) and backfill sources, as pure functions over maps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gossip.interval_map import IntervalMap

__all__ = ["intersect", "unrecoverable", "find_source"]


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
