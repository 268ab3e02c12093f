"""The checker against the reference model (tests/nemesis_model.py): correct runs pass every
check; one injected violation of each kind fails exactly that check, and its verdict names
the violation; a simulated GC that ignores the cut or the acks is rejected."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.nemesis_model import simulate
from tidemark.nemesis.checker import Bounds, check, check_twice, first_missing
from tidemark.nemesis.history import (
    FinalPartition,
    Handled,
    History,
    PartitionSample,
    Sample,
    SendAck,
)

BOUNDS = Bounds(converge_s=30.0)
runs = st.integers(0, 2**32 - 1)


def _run(seed: int, mode: str = "correct") -> History:
    return simulate(random.Random(seed), mode, seed)


def acked_at(a: SendAck, t_ms: int, cut: int) -> bool:
    """The reference definition: acked and stable by ``t_ms`` when that time is known, else
    its Ack below the claimed cut."""
    if a.acked_stable_ms is not None:
        return a.acked_stable_ms <= t_ms
    return a.acked_by is not None and a.acked_by < cut


def max_valid_gc(h: History, s: Sample, p: int) -> int:
    """The highest GC point ``s`` could claim for ``p``: its cut, lowered to the first Send
    not acked at its time (a plain scan)."""
    ps = s.partitions[p]
    c = ps.cut if ps.cut is not None else 2**62
    return min([c, *(a.offset for a in h.acks.get(p, []) if not acked_at(a, s.t_ms, c))])


# ---- injections: each returns (broken history, a string the first violation must name) ----


def lost(h: History, rnd: random.Random) -> tuple[History, str] | None:
    ids = [c.message_id for cs in h.confirmed.values() for c in cs]
    if not ids:
        return None
    mid = rnd.choice(ids)
    for r, rows in h.handled.items():
        h.handled[r] = [x for x in rows if x.message_id != mid]
    return h, mid


def twice(h: History, rnd: random.Random) -> tuple[History, str] | None:
    rs = [r for r, rows in h.handled.items() if rows]
    if not rs:
        return None
    r = rnd.choice(rs)
    rows = h.handled[r]
    i = rnd.randrange(len(rows))
    x = rows[i]
    if rnd.random() < 0.5:                               # again, by the same incarnation
        rows.insert(i + 1, x)
    else:                                                # by a new one, not redeliverable
        h.redeliverable.discard(x.message_id)
        rows.append(Handled(f"{r}#late", x.message_id, x.sender, x.seq))
        incs: dict[str, set[str]] = {}
        for y in rows[:-1]:
            incs.setdefault(y.message_id, set()).add(y.incarnation)
        again = any(len(v) > 1 for v in incs.values())   # another legit redelivery
        if not h.dedup.get(r) and not again and rnd.random() < 0.5:
            h.redeliverable.add(x.message_id)            # redeliverable, but dedup now on
            h.dedup[r] = True
    return h, x.message_id


def order(h: History, rnd: random.Random) -> tuple[History, str] | None:
    pairs = [(r, i, j) for r, rows in h.handled.items() for i in range(len(rows))
             for j in range(i + 1, len(rows))
             if rows[i].incarnation == rows[j].incarnation and rows[i].sender == rows[j].sender]
    if not pairs:
        return None
    r, i, j = rnd.choice(pairs)
    rows = h.handled[r]
    rows[i], rows[j] = rows[j], rows[i]
    # the first inversion the checker meets: the first later row of that sender in that
    # incarnation whose seq is not above the largest before it
    top, named = -1, ""
    for x in rows:
        if x.incarnation == rows[i].incarnation and x.sender == rows[i].sender:
            if x.seq <= top and not named:
                named = x.message_id
            top = max(top, x.seq)
    return h, named


def cut(h: History, rnd: random.Random) -> tuple[History, str] | None:
    claims = [(k, p) for k, s in enumerate(h.samples) for p in s.partitions]
    if not claims:
        return None
    k, p = rnd.choice(claims)
    s = h.samples[k]
    end = max((a.offset for a in h.acks.get(p, [])), default=-1)
    ps = s.partitions[p]
    too_far = max([end + 1, ps.cut or 0, ps.gc_point or 0, *(hi for _, hi in ps.held)]) + 1
    parts = dict(s.partitions)
    parts[p] = PartitionSample(ps.held, too_far, ps.gc_point)
    h.samples[k] = Sample(s.t_ms, s.node, parts)
    return h, f"txlog/{p}@"


def gc(h: History, rnd: random.Random) -> tuple[History, str] | None:
    claims = [(k, p) for k, s in enumerate(h.samples) for p in s.partitions
              if s.partitions[p].cut is not None]
    if not claims:
        return None
    k, p = rnd.choice(claims)
    s = h.samples[k]
    ps = s.partitions[p]
    assert ps.cut is not None
    unacked = [a.offset for a in h.acks.get(p, [])
               if a.offset < ps.cut and not acked_at(a, s.t_ms, ps.cut)]
    if unacked and rnd.random() < 0.7:
        g, named = rnd.choice(unacked) + 1, f"txlog/{p}@{min(unacked)}"
    else:
        g, named = ps.cut + 1, f"txlog/{p}@{ps.cut}"
    parts = dict(s.partitions)
    parts[p] = PartitionSample(ps.held, ps.cut, g)
    h.samples[k] = Sample(s.t_ms, s.node, parts)
    return h, named


def converge(h: History, rnd: random.Random) -> tuple[History, str] | None:
    shared = [p for p, ns in h.owners.items() if len(ns) > 1]
    if not shared:
        return None
    p = rnd.choice(shared)
    way = rnd.randrange(3)
    if way == 2 and h.final.pairs:
        i = rnd.randrange(len(h.final.pairs))
        c = h.final.pairs[i]
        assert c.healed_at_ms is not None
        h.final.pairs[i] = type(c)(c.partition, c.nodes, c.healed_at_ms,
                                   c.healed_at_ms + int(BOUNDS.converge_s * 1000) + 1)
        return h, f"txlog/{c.partition}: {c.nodes[0]} and {c.nodes[1]}"
    n = rnd.choice(h.owners[p])
    f = h.final.nodes[n][p]
    if way == 0 or not f.held:
        h.final.nodes[n][p] = FinalPartition(f.held, f.digest + "x")
    else:
        lo, hi = f.held[-1]
        h.final.nodes[n][p] = FinalPartition(f.held[:-1] + ((lo, hi - 1),), f.digest)
    return h, f"txlog/{p}:"


def release(h: History, rnd: random.Random) -> tuple[History, str] | None:
    """A node no longer stores a Send that was never acked (a GC that released it)."""
    cands = [(p, a) for p, xs in sorted(h.acks.items()) for a in xs if a.acked_by is None
             and any(p in h.final.nodes.get(n, {}) for n in h.owners.get(p, []))]
    if not cands:
        return None
    p, a = rnd.choice(cands)
    n = rnd.choice([n for n in h.owners[p] if p in h.final.nodes.get(n, {})])
    f = h.final.nodes[n][p]
    h.final.nodes[n][p] = FinalPartition(f.held, f.digest, (a.offset,), a.offset + 1)
    return h, f"txlog/{p}@{a.offset}: Send {a.message_id} released by {n}"


INJECT: dict[str, Callable[[History, random.Random], tuple[History, str] | None]] = {
    "lost": lost, "twice": twice, "order": order, "cut": cut, "gc": gc, "release": release,
    "converge": converge}


@settings(max_examples=300, deadline=None)
@given(runs)
def test_a_correct_run_passes_every_check(seed: int) -> None:
    report = check(_run(seed), BOUNDS)
    assert report.ok, report.to_json()
    assert report.seed == seed


@pytest.mark.parametrize("kind", list(INJECT))
@settings(max_examples=150, deadline=None)
@given(seed=runs, pick=st.randoms(use_true_random=False))
def test_one_violation_fails_exactly_its_check_and_is_named(kind: str, seed: int,
                                                           pick: random.Random) -> None:
    done = INJECT[kind](copy.deepcopy(_run(seed)), pick)
    assume(done is not None)
    assert done is not None
    h, named = done
    report = check(h, BOUNDS)
    assert report.failed == [kind], report.to_json()
    first = report.verdict(kind).first
    assert first is not None and named in first, (named, first)


@pytest.mark.parametrize("mode", ["ignore_cut", "ignore_acks"])
@settings(max_examples=200, deadline=None)
@given(seed=runs)
def test_a_broken_gc_is_rejected_and_only_by_the_gc_check(mode: str, seed: int) -> None:
    """Same run, same draws, only the GC differs: the correct GC never claims more than the
    reference allows; the broken one fails the gc check exactly where it does, and nothing
    else fails."""
    good, bad = _run(seed), _run(seed, mode)
    assert all((s.partitions[p].gc_point or 0) <= max_valid_gc(good, s, p)
               for s in good.samples for p in s.partitions)
    too_far = [(s.t_ms, p) for s in bad.samples for p in s.partitions
               if (s.partitions[p].gc_point or 0) > max_valid_gc(bad, s, p)]
    report = check(bad, BOUNDS)
    assert report.failed == (["gc"] if too_far else []), report.to_json()
    assert report.verdict("gc").violations == len(too_far)


@pytest.mark.parametrize("mode", ["ignore_cut", "ignore_acks"])
def test_the_checker_can_fail(mode: str) -> None:
    """Most seeded runs of a broken GC are rejected; every correct one passes."""
    rejected = sum(not check(_run(seed, mode), BOUNDS).ok for seed in range(100))
    assert rejected >= 50
    assert all(check(_run(seed), BOUNDS).ok for seed in range(100))


def test_first_missing() -> None:
    assert first_missing([(0, 5), (5, 9)], 0, 9) is None
    assert first_missing([(0, 5), (6, 9)], 0, 9) == 5
    assert first_missing([(2, 9)], 0, 9) == 0
    assert first_missing([(2, 9)], 3, 3) is None
    assert first_missing([], 4, 6) == 4
    assert first_missing([(6, 9), (0, 7)], 1, 9) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), max_size=6),
       st.integers(0, 50), st.integers(0, 50))
def test_first_missing_against_a_set(spans: list[tuple[int, int]], lo: int, hi: int) -> None:
    ranges = [(a, a + n) for a, n in spans]
    have = {o for a, b in ranges for o in range(a, b)}
    want = next((o for o in range(lo, hi) if o not in have), None)
    assert first_missing(ranges, lo, hi) == want


def test_the_dedup_windows_id_may_run_again_with_the_store_on_and_no_other() -> None:
    rows = [Handled("r#1", "m1", "s", 1), Handled("r#1", "m2", "s", 2),
            Handled("r#2", "m2", "s", 2), Handled("r#2", "m3", "s", 3)]
    h = History(handled={"r": rows}, dedup={"r": True})
    assert not check_twice(h).ok
    h.dedup_window = {"m2"}
    v = check_twice(h)
    assert v.ok and v.details["redelivered"] == 1
    h.handled["r"].append(Handled("r#2", "m1", "s", 1))   # m1 is not in the window
    assert not check_twice(h).ok
    assert History.from_dict(h.to_dict()).dedup_window == {"m2"}


@settings(max_examples=150, deadline=None)
@given(seed=runs, pick=st.randoms(use_true_random=False))
def test_gc_progress_below_the_gc_point_is_not_a_divergence(seed: int,
                                                             pick: random.Random) -> None:
    """A co-replica whose GC sweep went further (its map starts higher, still at or below
    the GC point) has converged; one missing a record above the GC point has not."""
    h = _run(seed)
    shared = [p for p, ns in h.owners.items() if len(ns) > 1
              and all(h.final.nodes.get(n, {}).get(p) is not None for n in ns)]
    assume(shared)
    p = pick.choice(shared)
    a = h.owners[p][0]
    fa = h.final.nodes[a][p]
    assume(fa.held and all(h.final.nodes[n][p].held == fa.held for n in h.owners[p]))
    top = fa.held[-1][1]
    swept = min(fa.held[0][0] + 1 + pick.randrange(top - fa.held[0][0]), top)
    gc = FinalPartition(clip(fa.held, swept), fa.digest, fa.released, swept)
    h.final.nodes[a][p] = gc
    for n in h.owners[p]:  # the GC point is universal: every owner's is at least there
        f = h.final.nodes[n][p]
        if n != a:
            h.final.nodes[n][p] = FinalPartition(f.held, f.digest, f.released,
                                                 max(swept, f.gc_point or 0))
    assert "converge" not in check(h, BOUNDS).failed
    point = max(h.final.nodes[n][p].gc_point or 0 for n in h.owners[p])
    if point < top:  # a record above the GC point missing from one of them
        lo, hi = gc.held[-1]
        h.final.nodes[a][p] = FinalPartition(gc.held[:-1] + (((lo, hi - 1),) if hi - 1 > lo
                                                              else ()), gc.digest,
                                             gc.released, swept)
        report = check(h, BOUNDS)
        assert "converge" in report.failed and f"txlog/{p}:" in (
            report.verdict("converge").first or ""), report.to_json()


def clip(held: tuple, floor: int) -> tuple:
    """``held`` without what lies below ``floor``."""
    return tuple((max(lo, floor), hi) for lo, hi in held if hi > floor)
