"""Interval maps against a reference model: a Python set of applied offsets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.gossip.interval_map import IntervalMap

ranges = st.tuples(st.integers(0, 200), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1]))


def _runs(offsets: set[int], upto: int) -> list[tuple[int, int]]:
    out, start = [], None
    for o in range(upto + 1):
        missing = o < upto and o not in offsets
        if missing and start is None:
            start = o
        elif not missing and start is not None:
            out.append((start, o))
            start = None
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(ranges, max_size=25), st.integers(0, 260))
def test_matches_set_model(inserts: list[tuple[int, int]], probe_hi: int) -> None:
    m, model = IntervalMap(), set()
    for a, b in inserts:
        m.insert(a, b)
        model.update(range(a, b))
        # structure: base then sorted, disjoint, non-adjacent detached ranges above it
        last = m.base_end
        for a2, b2 in m.detached:
            assert last < a2 < b2
            last = b2
    for o in range(0, 260):
        assert m.contains(o) == (o in model), o
    base_end = 0
    while base_end in model:
        base_end += 1
    assert m.base_end == base_end
    assert m.end == (max(model) + 1 if model else 0)
    assert m.gaps(probe_hi) == _runs(model, probe_hi)
    assert IntervalMap.from_bytes(m.to_bytes()) == m


@settings(max_examples=200, deadline=None)
@given(st.lists(ranges, max_size=15), st.integers(0, 260))
def test_compaction_keeps_coverage(inserts: list[tuple[int, int]], point: int) -> None:
    m = IntervalMap()
    for a, b in inserts:
        m.insert(a, b)
    before = [m.contains(o) for o in range(260)]
    if point <= m.base_end:
        m.compact_below(point)
        assert m.floor == point
        assert [m.contains(o) for o in range(260)] == before
    else:
        try:
            m.compact_below(point)
        except ValueError:
            return
        raise AssertionError("compaction above the base must be refused")


@settings(max_examples=100, deadline=None)
@given(st.lists(ranges, max_size=15), ranges)
def test_splice_closes_gap(inserts: list[tuple[int, int]], gap: tuple[int, int]) -> None:
    m = IntervalMap()
    for a, b in inserts:
        m.insert(a, b)
    for a, b in m.gaps():
        m.splice(a, b)
    assert m.gaps() == [] and m.detached == []
