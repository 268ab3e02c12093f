"""GC point: never above the cut, only rises, and held down by pins."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.gossip.gc_point import clamp_pin, cluster_gc_point, local_gc_cut
from tidemark.gossip.stable_cut import ReplicaView, stable_cut

NODES = ["a", "b"]
TP = "txlog/0"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 20),
                          st.one_of(st.none(), st.integers(0, 200)), st.booleans()),
                max_size=50))
def test_gc_point_below_cut_monotone_and_pinned(script) -> None:
    owners = {TP: NODES}
    ends = {n: 0 for n in NODES}
    pins: dict[str, list[dict[str, int]]] = {n: [] for n in NODES}
    views: dict[str, ReplicaView] = {}
    gc_cuts: dict[str, dict[str, int]] = {}
    cut: dict[str, int] = {}
    gc: dict[str, int] = {}
    for ni, grow, pin_at, drop_pin in script:
        node = NODES[ni]
        ends[node] += grow
        if pin_at is not None:
            pins[node].append(clamp_pin({TP: pin_at}, gc))
        if drop_pin and pins[node]:
            pins[node].pop(0)
        views[node] = ReplicaView(node, base={TP: (0, ends[node])})
        cut = stable_cut(owners, views, cut)
        gc_cuts[node] = local_gc_cut(cut, pins[node])
        new = cluster_gc_point(owners, gc_cuts, cut, gc)
        assert new[TP] >= gc.get(TP, 0), "GC point went down"
        assert new[TP] <= cut[TP], "GC point above the cut"
        for n in NODES:
            for pin in pins[n]:
                assert new[TP] <= pin[TP], "a pin did not hold the GC point"
        gc = new


def test_pin_below_gc_point_is_raised() -> None:
    assert clamp_pin({TP: 3}, {TP: 10}) == {TP: 10}
    assert clamp_pin({TP: 30}, {TP: 10}) == {TP: 30}
