"""The checker: pure verdicts over a :class:`~tidemark.nemesis.history.History`.

Each check returns a :class:`Verdict`; :func:`check` runs them all into a :class:`Report`,
which the harness prints as one JSON summary. A verdict names its first violation in a short
string (the message id, or the partition, offset, node and time), counts what it checked and
what it could not judge (``unknown``, never a violation). docs/partitions.md, "The checker",
says what each verdict means.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, combinations, islice
from typing import Any

from tidemark.nemesis.history import History, PartitionSample, Range, Sample, SendAck, normalise

__all__ = ["Bounds", "Verdict", "Report", "check", "check_lost", "check_twice", "check_order",
           "check_cut", "check_gc", "check_converge", "first_missing", "CHECKS"]


@dataclass(frozen=True)
class Bounds:
    """Time bounds a run must meet: co-replicas converge within ``converge_s`` of healing."""

    converge_s: float = 30.0


@dataclass
class Verdict:
    """One check's result: ``first`` names the first violation (None when ok)."""

    name: str
    ok: bool
    checked: int
    first: str | None = None
    violations: int = 0
    unknown: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"name": self.name, "ok": self.ok, "checked": self.checked, "first": self.first,
                "violations": self.violations, "unknown": self.unknown,
                "details": self.details}


@dataclass
class Report:
    """Every verdict of one run; ``ok`` only if every verdict is."""

    verdicts: list[Verdict]
    seed: int | None = None
    bounds: Bounds = field(default_factory=Bounds)

    @property
    def ok(self) -> bool:
        """True when no check found a violation."""
        return all(v.ok for v in self.verdicts)

    @property
    def failed(self) -> list[str]:
        """The names of the failed checks."""
        return [v.name for v in self.verdicts if not v.ok]

    def verdict(self, name: str) -> Verdict:
        """The verdict of one check by name."""
        for v in self.verdicts:
            if v.name == name:
                return v
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: ``ok``, ``failed``, ``seed``, ``bounds`` and each verdict by name."""
        return {"ok": self.ok, "failed": self.failed, "seed": self.seed,
                "bounds": {"converge_s": self.bounds.converge_s},
                "verdicts": {v.name: v.to_dict() for v in self.verdicts}}

    def to_json(self) -> str:
        """The one-line JSON summary."""
        return json.dumps(self.to_dict(), sort_keys=True)


class _Tally:
    """Counts violations and keeps the first one's description."""

    def __init__(self) -> None:
        self.first: str | None = None
        self.violations = 0

    def add(self, what: str) -> None:
        self.violations += 1
        if self.first is None:
            self.first = what

    def verdict(self, name: str, checked: int, unknown: int = 0,
                **details: Any) -> Verdict:
        return Verdict(name, self.violations == 0, checked, self.first, self.violations,
                       unknown, dict(details))


def first_missing(held: Iterable[Range], lo: int, hi: int) -> int | None:
    """The first offset of ``[lo, hi)`` that ``held`` does not cover, or None."""
    pos = lo
    for a, b in normalise(held):
        if pos >= hi or a > pos:
            break
        pos = max(pos, b)
    return pos if pos < hi else None


# ---- delivery --------------------------------------------------------------------------------


def check_lost(h: History) -> Verdict:
    """**lost**: every id a sender saw confirmed was handled by some incarnation of some
    recipient. The first lost id is by sender (sorted), then send order."""
    handled = {x.message_id for hs in h.handled.values() for x in hs}
    t, checked = _Tally(), 0
    for sender in sorted(h.confirmed):
        for c in h.confirmed[sender]:
            checked += 1
            if c.message_id not in handled:
                t.add(f"{c.message_id} (sender {sender}, seq {c.seq}) confirmed, never handled")
    return t.verdict("lost", checked, lost=t.violations)


def check_twice(h: History) -> Verdict:
    """**twice**: per recipient, no id handled twice by one incarnation; an id handled by a
    second incarnation only if the recipient's persisted dedup store is off (a recipient not
    listed counts as off) and the id is in ``redeliverable``, or the store is on and the id
    is in ``dedup_window`` (the store's one documented window: a kill between a handler's
    return and the store's put)."""
    t, checked, redelivered = _Tally(), 0, 0
    for r in sorted(h.handled):
        dedup = h.dedup.get(r, False)
        incs: dict[str, list[str]] = {}
        for x in h.handled[r]:
            checked += 1
            seen = incs.setdefault(x.message_id, [])
            if x.incarnation in seen:
                t.add(f"{x.message_id} handled twice by {r} incarnation {x.incarnation}")
            elif seen:
                if dedup and x.message_id in h.dedup_window:
                    redelivered += 1
                elif dedup:
                    t.add(f"{x.message_id} handled by {r} incarnations {seen[-1]} and"
                          f" {x.incarnation} with the dedup store on")
                elif x.message_id not in h.redeliverable:
                    t.add(f"{x.message_id} handled by {r} incarnations {seen[-1]} and"
                          f" {x.incarnation}, not redeliverable")
                else:
                    redelivered += 1
            seen.append(x.incarnation)
    return t.verdict("twice", checked, redelivered=redelivered)


def check_order(h: History) -> Verdict:
    """**order**: within one incarnation of a recipient, each sender's seqs strictly increase.
    A repeat of an id already handled by that incarnation is left to **twice**."""
    t, checked = _Tally(), 0
    for r in sorted(h.handled):
        last: dict[tuple[str, str], int] = {}
        seen: set[tuple[str, str]] = set()
        for x in h.handled[r]:
            if (x.incarnation, x.message_id) in seen:
                continue
            seen.add((x.incarnation, x.message_id))
            checked += 1
            key = (x.incarnation, x.sender)
            if key in last and x.seq <= last[key]:
                t.add(f"{x.message_id} (sender {x.sender}, seq {x.seq}) after seq {last[key]}"
                      f" in {r} incarnation {x.incarnation}")
            last[key] = max(x.seq, last.get(key, x.seq))
    return t.verdict("order", checked)


# ---- replicas --------------------------------------------------------------------------------


def _by_node(samples: Sequence[Sample]) -> dict[str, tuple[list[int], list[Sample]]]:
    """Per node, its samples sorted by time (stable), with their times for bisecting."""
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.node, []).append(s)
    return {n: ([s.t_ms for s in ss], ss)
            for n, ss in ((n, sorted(ss, key=lambda s: s.t_ms)) for n, ss in out.items())}


def _claims(samples: Sequence[Sample]) -> Iterable[tuple[Sample, int, PartitionSample]]:
    for s in samples:
        for p, ps in sorted(s.partitions.items()):
            yield s, p, ps


def check_cut(h: History) -> Verdict:
    """**cut**: a stable cut ``o`` claimed by any node at time ``t`` for partition ``p`` was
    held by every owner of ``p``.

    For each owner ``w`` the witness is ``w``'s first sample of ``p`` at or after ``t`` (its
    own sample at ``t`` when ``w`` is the claimant): it must cover ``[min(g, o), o)``, ``g``
    being where the witness's holdings start (its floor, else its GC point, else 0).
    Holdings only grow except below that start, so an offset the witness misses was missing
    at ``t`` too: every violation is certain
    (a witness that covers the range proves nothing about ``t``; the check is sound, not
    complete). An owner with no such sample, or a partition without known owners, is
    counted in ``unknown``, not as a violation. Cuts of 0 claim nothing.
    """
    nodes = _by_node(h.samples)
    t, checked, unknown = _Tally(), 0, 0
    for s, p, ps in _claims(h.samples):
        o = ps.cut
        if o is None or o <= 0:
            continue
        checked += 1
        owners = h.owners.get(p)
        if not owners:
            unknown += 1
            continue
        for w in owners:
            times, ss = nodes.get(w, ([], []))
            i = bisect_left(times, s.t_ms)
            witness = next(((x.t_ms, x.partitions[p]) for x in islice(ss, i, None)
                            if p in x.partitions), None)
            if witness is None:
                unknown += 1
                continue
            wt, wp = witness
            miss = first_missing(wp.held, min(wp.start, o), o)
            if miss is not None:
                t.add(f"txlog/{p}@{miss}: cut {o} claimed by {s.node} at t={s.t_ms} ms, owner"
                      f" {w} does not hold it at t={wt} ms")
    return t.verdict("cut", checked, unknown)


class _SendIndex:
    """A partition's Sends by offset with prefix maxima, to find the first Send below a GC
    point that was not acked at a time in O(log n)."""

    def __init__(self, sends: Iterable[SendAck]) -> None:
        self.sends = sorted(sends, key=lambda a: a.offset)
        self.offsets = [a.offset for a in self.sends]
        # acked by time: the time it became acked-and-stable (-inf if unknown: judged by
        # offset); acked by offset: its Ack's offset, judged against the cut (+inf: not acked)
        by_time = [float(a.acked_stable_ms) if a.acked_stable_ms is not None else -math.inf
                   for a in self.sends]
        by_off = [-math.inf if a.acked_stable_ms is not None else
                  math.inf if a.acked_by is None else float(a.acked_by) for a in self.sends]
        self.max_time = list(accumulate(by_time, max))
        self.max_off = list(accumulate(by_off, max))

    def first_unacked(self, below: int, t_ms: int, cut: int) -> SendAck | None:
        """The first Send below ``below`` not acked at ``t_ms``: acked-and-stable after it,
        or (that time unknown) its Ack not below ``cut``, or never acked."""
        k = bisect_left(self.offsets, below)
        i = min(bisect_right(self.max_time, t_ms), bisect_left(self.max_off, cut))
        return self.sends[i] if i < k else None


def check_gc(h: History) -> Verdict:
    """**gc**: a GC point ``g`` claimed by a node at time ``t`` for partition ``p`` passes
    neither the cut that node claimed in the same sample (``g <= cut``) nor any Send of ``p``
    below ``g`` that was not acked at ``t``. A Send is acked at ``t`` when it became
    acked-and-stable at or before ``t``; when that time is unknown, when the record that
    acked it lies below the claimed cut (below ``g`` if no cut was claimed)."""
    index = {p: _SendIndex(xs) for p, xs in h.acks.items()}
    t, checked = _Tally(), 0
    for s, p, ps in _claims(h.samples):
        g = ps.gc_point
        if g is None or g <= 0:
            continue
        checked += 1
        if ps.cut is not None and g > ps.cut:
            t.add(f"txlog/{p}@{ps.cut}: GC point {g} claimed by {s.node} at t={s.t_ms} ms"
                  f" passes its cut {ps.cut}")
            continue
        ix = index.get(p)
        bad = ix.first_unacked(g, s.t_ms, g if ps.cut is None else ps.cut) if ix else None
        if bad is not None:
            t.add(f"txlog/{p}@{bad.offset}: GC point {g} claimed by {s.node} at t={s.t_ms} ms"
                  f" passes Send {bad.message_id}, not acked then")
    return t.verdict("gc", checked)


def clip_below(ranges: tuple[Range, ...], floor: int) -> tuple[Range, ...]:
    """``ranges`` (normalised) without what lies below ``floor``."""
    return tuple((max(lo, floor), hi) for lo, hi in ranges if hi > floor)


def check_converge(h: History, bounds: Bounds) -> Verdict:
    """**converge**: after healing, every two owners of a partition that report it in
    ``final`` have equal interval maps above the higher of their GC points (below it, each
    releases at its own pace), and equal digests when their whole maps are equal, and each
    co-replica pair with known ``healed_at_ms`` and ``converged_at_ms`` converged within
    ``bounds.converge_s``. An owner absent from ``final``, or a pair healed but never seen
    converged, is ``unknown``."""
    t, checked, unknown = _Tally(), 0, 0
    for p in sorted(h.owners):
        have = []
        for n in sorted(h.owners[p]):
            f = h.final.nodes.get(n, {}).get(p)
            if f is None:
                unknown += 1
            else:
                have.append((n, f))
        for (a, fa), (b, fb) in combinations(have, 2):
            checked += 1
            ha, hb = normalise(fa.held), normalise(fb.held)
            if ha != hb:
                # the GC point is universal (the gc verdict checks that none passes an unacked
                # Send) but learnt at different times, and below it each node's GC sweep
                # releases at its own pace (its map's floor is the sweep's cursor): only what
                # lies above the higher of the two must be held by both
                floor = max(fa.gc_point or 0, fb.gc_point or 0)
                ca, cb = clip_below(ha, floor), clip_below(hb, floor)
                if ca != cb:
                    t.add(f"txlog/{p}: {a} and {b} differ after healing:"
                          f" {[list(r) for r in ca]} vs {[list(r) for r in cb]}"
                          f" (above the GC point {floor})")
            elif fa.digest != fb.digest:
                t.add(f"txlog/{p}: {a} and {b} hold the same offsets with different digests")
    limit_ms = bounds.converge_s * 1000
    slowest = 0
    for c in h.final.pairs:
        if c.healed_at_ms is None or c.converged_at_ms is None:
            unknown += 1
            continue
        checked += 1
        took = c.converged_at_ms - c.healed_at_ms
        slowest = max(slowest, took)
        if took > limit_ms:
            t.add(f"txlog/{c.partition}: {c.nodes[0]} and {c.nodes[1]} converged {took} ms"
                  f" after healing (bound {bounds.converge_s} s)")
    return t.verdict("converge", checked, unknown, slowest_ms=slowest)


def check_release(h: History) -> Verdict:
    """**release**: every recorded Send a node no longer stores after the run (``final``
    ``released``) lies below that node's GC point and was acked by a record below it too:
    nothing was released before it was acked and stable. A released offset that is not a
    recorded Send, or a node without a known GC point, is counted in ``unknown``."""
    index = {p: {a.offset: a for a in xs} for p, xs in h.acks.items()}
    t, checked, unknown = _Tally(), 0, 0
    for node in sorted(h.final.nodes):
        for p, f in sorted(h.final.nodes[node].items()):
            for off in f.released:
                send = index.get(p, {}).get(off)
                if send is None or f.gc_point is None:
                    unknown += 1
                    continue
                checked += 1
                if off >= f.gc_point or send.acked_by is None or send.acked_by >= f.gc_point:
                    how = ("never acked" if send.acked_by is None
                           else f"acked at {send.acked_by}")
                    t.add(f"txlog/{p}@{off}: Send {send.message_id} released by {node}, {how},"
                          f" GC point {f.gc_point}")
    return t.verdict("release", checked, unknown)


CHECKS: dict[str, Callable[[History, Bounds], Verdict]] = {
    "lost": lambda h, b: check_lost(h),
    "twice": lambda h, b: check_twice(h),
    "order": lambda h, b: check_order(h),
    "cut": lambda h, b: check_cut(h),
    "gc": lambda h, b: check_gc(h),
    "release": lambda h, b: check_release(h),
    "converge": check_converge,
}
"""Every check by name, in the report's order."""


def check(history: History, bounds: Bounds | None = None) -> Report:
    """Run every check over ``history``."""
    b = bounds or Bounds()
    return Report([fn(history, b) for fn in CHECKS.values()], history.seed, b)
