"""Pure missing-data and backfill-source logic."""

from hypothesis import given
from hypothesis import strategies as st

from tidemark.gossip.cluster_config import Epoch, Partition, fold, validate
from tidemark.gossip.interval_map import IntervalMap
from tidemark.gossip.missing import find_source, intersect, unrecoverable, without_losses


def _map(base_end: int, *detached: tuple[int, int]) -> IntervalMap:
    return IntervalMap(base_end, 0, [list(d) for d in detached])


def test_intersect() -> None:
    assert intersect([(0, 5), (8, 12)], [(3, 10)]) == [(3, 5), (8, 10)]
    assert intersect([], [(0, 1)]) == []


def test_unrecoverable_needs_every_holder_lacking_it() -> None:
    maps = {"a": _map(10, (20, 30)), "b": _map(15, (25, 30))}
    assert unrecoverable(["a", "b"], maps, log_start=20) == [(15, 20)]
    assert unrecoverable(["a", "b"], maps, log_start=12) == []
    assert unrecoverable(["a", "b", "c"], maps, log_start=20) == []  # c has not reported


def test_find_source_prefers_longest_reach() -> None:
    maps = {"a": _map(12), "b": _map(5, (8, 40))}
    assert find_source(10, 30, maps) == ("b", 30)
    assert find_source(6, 30, maps) == ("a", 12)
    assert find_source(50, 60, maps) is None
    assert find_source(3, 30, maps) == ("a", 12)


def _epoch(n: int, prev: int | None, replicas: tuple[str, ...]) -> Epoch:
    return Epoch(n, prev, 2, {r: f"127.0.0.1:{7000 + i}" for i, r in enumerate(replicas)},
                 (Partition("p0", (0, 1), replicas),), created_ms=0)


def test_first_valid_successor_wins() -> None:
    g = _epoch(1, None, ("a", "b"))
    first, competing = _epoch(2, 1, ("a",)), _epoch(2, 1, ("b",))
    invalid = Epoch(2, 1, 2, {}, (Partition("p0", (0,), ("a",)),), created_ms=0)
    assert validate(invalid) is not None
    assert fold(None, [_epoch(1, None, ("x",)).__class__(1, 5, 2, g.nodes, g.partitions), g,
                       invalid, first, competing]) == first
    assert fold(g, [_epoch(3, 2, ("a",))]) == g  # skips an epoch: ignored
    assert Epoch.from_record(first.to_record()) == first


ranges = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20)), max_size=6)


@given(ranges, ranges)
def test_without_losses_is_set_difference(applied: list, lost: list) -> None:
    m = IntervalMap()
    for a, n in applied:
        m.insert(a, a + n)
    spans = sorted((a, a + n) for a, n in lost)
    out = without_losses(m, spans)
    model = {o for o in range(100) if m.contains(o)} - {o for a, b in spans for o in range(a, b)}
    assert {o for o in range(100) if out.contains(o)} == model
    assert out.detached == sorted(out.detached) and all(a > out.base_end for a, _ in out.detached)
    assert all(a < b for a, b in out.detached)
    assert without_losses(out, spans).to_json() == out.to_json()  # idempotent


def test_a_range_another_replica_spliced_is_lost_for_me_too() -> None:
    mine, theirs = _map(10, (20, 30)), _map(30)            # they spliced [10, 20)
    held = without_losses(theirs, [(10, 20)])
    assert find_source(10, 20, {"b": held}) is None
    assert unrecoverable(["a", "b"], {"a": mine, "b": held}, log_start=20) == [(10, 20)]
    assert unrecoverable(["a", "b"], {"a": mine, "b": theirs}, log_start=20) == []
