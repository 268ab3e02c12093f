"""The stable cut against a model: per-replica sets of applied offsets that only grow."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.gossip.cluster_config import Epoch, Partition
from tidemark.gossip.interval_map import IntervalMap
from tidemark.gossip.node_state import NodeState, PartitionRanges
from tidemark.gossip.stable_cut import HoldTracker, ReplicaView, cut_holders, stable_cut
from tidemark.replica.membership import node_cut

REPLICAS = ["r0", "r1", "r2"]
TPS = ["txlog/0", "txlog/1"]

# A step: replica index, tp index, range to apply, whether the replica gossips afterwards.
steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 60),
                           st.integers(1, 15), st.booleans()), max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(1, 3))
def test_cut_only_rises_and_never_covers_a_missing_offset(script, n_replicas) -> None:
    replicas = REPLICAS[:n_replicas]
    owners = {tp: replicas for tp in TPS}
    maps = {(r, tp): IntervalMap() for r in replicas for tp in TPS}
    views: dict[str, ReplicaView] = {}
    cut: dict[str, int] = {}
    for ri, ti, start, length, gossip in script:
        if ri >= n_replicas:
            continue
        r, tp = replicas[ri], TPS[ti]
        maps[(r, tp)].insert(start, start + length)
        if gossip:  # gossip is a snapshot taken at some moment; stale views are normal
            views[r] = ReplicaView(r, 1, {t: (0, maps[(r, t)].base_end) for t in TPS})
        new = stable_cut(owners, views, cut)
        for t in TPS:
            assert new[t] >= cut.get(t, 0), "the cut went down"
            for rep in replicas:
                assert all(maps[(rep, t)].contains(o) for o in range(new[t])), \
                    f"cut {new[t]} covers an offset {rep} lacks"
        cut = new


def test_missing_view_holds_previous() -> None:
    owners = {"txlog/0": ["a", "b"]}
    views = {"a": ReplicaView("a", base={"txlog/0": (0, 10)})}
    assert stable_cut(owners, views, {"txlog/0": 3}) == {"txlog/0": 3}
    views["b"] = ReplicaView("b", base={"txlog/0": (0, 7)})
    assert stable_cut(owners, views, {"txlog/0": 3}) == {"txlog/0": 7}
    assert cut_holders(owners, views, {"txlog/0": 10}) == {"b": {"txlog/0"}}
    assert cut_holders(owners, views, {"txlog/0": 7}) == {}


def test_hold_tracker_reports_longest() -> None:
    t = HoldTracker()
    assert t.update([], 0.0) is None
    t.update(["b"], 1.0)
    t.update(["b", "a"], 2.0)
    assert t.update(["b", "a"], 4.5) == {"node": "b", "seconds": 3.5}
    assert t.update(["a"], 5.0) == {"node": "a", "seconds": 3.0}


# Adversarial gossip: every field of every NodeState is arbitrary — its own map (base end),
# the cut it claims (``ust``), ``caught_up``, even states of nodes that are not replicas.
_NODES = ["a", "b", "j", "x"]   # a, b: replicas; j: joining; x: not a replica of p0
_state = st.builds(
    lambda node, end, claimed, caught_up, ts: NodeState(
        node, 1, ts, caught_up,
        tuple(PartitionRanges("txlog", k, 0, end, end + 5) for k in (0, 1)),
        ust={"txlog/0": claimed, "txlog/1": claimed}),
    st.sampled_from(_NODES), st.integers(0, 1000), st.integers(0, 1 << 40), st.booleans(),
    st.integers(0, 10))


@settings(max_examples=400, deadline=None)
@given(st.lists(_state, max_size=8), st.integers(0, 500))
def test_no_cut_exceeds_what_the_replicas_own_maps_justify(states, previous) -> None:
    epoch = Epoch(1, None, 2, {n: f"h:{i}" for i, n in enumerate(_NODES)},
                  (Partition("p0", (0, 1), ("a", "b"), ("j",)),))
    by_node = {s.node_id: s for s in states}  # what a node keeps: one state per node
    prev = {"txlog/0": previous, "txlog/1": previous}
    cut = node_cut(epoch, by_node, prev)
    for tp in ("txlog/0", "txlog/1"):
        own = [by_node[r].view().base[tp][1] for r in ("a", "b") if r in by_node]
        justified = min(own) if len(own) == 2 else 0
        assert cut[tp] <= max(previous, justified), (tp, cut, by_node)
