"""A reference model of a Tidemark run for the checker's tests: senders, recipients that crash
and restart, txlog partitions of Sends and Acks, owners copying prefixes (and detached
chunks), a cut = min over the owners' base ends, GC = min(cut, first Send not acked below the
cut), and the state after healing. ``simulate`` builds a :class:`History` of a correct run;
``gc_mode`` breaks the GC ("ignore_cut": the first Send whose Ack is merely appended, not
capped by the cut; "ignore_acks": the cut) without changing any other draw of the run."""

from __future__ import annotations

import random
import zlib

from tidemark.nemesis.history import (
    Confirmed,
    Convergence,
    Event,
    FinalPartition,
    Handled,
    History,
    PartitionSample,
    Sample,
    SendAck,
    normalise,
)

GC_MODES = ("correct", "ignore_cut", "ignore_acks")


def _ranges(held: set[int], floor: int) -> tuple[tuple[int, int], ...]:
    return normalise((o, o + 1) for o in held if o >= floor)


def _base_end(held: set[int]) -> int:
    e = 0
    while e in held:
        e += 1
    return e


def simulate(rnd: random.Random, gc_mode: str = "correct", seed: int | None = None) -> History:
    """A history of one correct run (bar the GC when ``gc_mode`` says otherwise)."""
    assert gc_mode in GC_MODES
    h = History()
    if seed is not None:
        h.events.append(Event(0, "seed", {"seed": seed}))
    senders = [f"S{i}" for i in range(rnd.randint(1, 3))]
    recipients = [f"R{i}" for i in range(rnd.randint(1, 2))]
    for r in recipients:
        h.dedup[r] = rnd.random() < 0.5
    # ---- sends and handling --------------------------------------------------------------
    seqs = dict.fromkeys(senders, 0)
    msgs: list[tuple[str, str, str, int]] = []          # id, sender, recipient, seq
    for _ in range(rnd.randint(0, 30)):
        s, r = rnd.choice(senders), rnd.choice(recipients)
        seqs[s] += rnd.randint(1, 2)
        msgs.append((f"{s}-{seqs[s]}", s, r, seqs[s]))
    handled_ids: set[str] = set()
    for mid, s, _r, seq in msgs:
        if rnd.random() < 0.9:
            h.confirmed.setdefault(s, []).append(Confirmed(mid, seq))
    confirmed = {c.message_id for cs in h.confirmed.values() for c in cs}
    unacked_last: set[str] = set()           # handled by a dying incarnation, ack never appended
    for r in recipients:
        todo = [m for m in msgs if m[2] == r and (m[0] in confirmed or rnd.random() < 0.5)]
        n_inc = rnd.randint(1, 3)
        cuts = sorted(rnd.randint(0, len(todo)) for _ in range(n_inc - 1))
        chunks = [todo[a:b] for a, b in zip([0, *cuts], [*cuts, len(todo)], strict=True)]
        rows: list[Handled] = []
        carry: tuple[str, str, str, int] | None = None
        for i, chunk in enumerate(chunks):
            inc = f"{r}#{i}"
            run = ([carry] if carry else []) + chunk
            rows += [Handled(inc, m[0], m[1], m[3]) for m in run]
            carry = None
            if i < len(chunks) - 1 and run and rnd.random() < 0.6:
                last = run[-1]                       # killed before its ack was appended
                unacked_last.add(last[0])
                if not h.dedup[r]:
                    carry = last
                    h.redeliverable.add(last[0])
        h.handled[r] = rows
        handled_ids |= {x.message_id for x in rows}
    # ---- the txlog -----------------------------------------------------------------------
    n_parts = rnd.randint(1, 3)
    part_of = {r: i % n_parts for i, r in enumerate(recipients)}
    logs: dict[int, list[tuple[str, str]]] = {p: [] for p in range(n_parts)}
    pending: dict[int, list[str]] = {p: [] for p in range(n_parts)}
    for mid, _s, r, _seq in msgs:
        p = part_of[r]
        logs[p].append(("send", mid))
        if mid in handled_ids and (mid not in unacked_last or rnd.random() < 0.5):
            pending[p].append(mid)
        for a in list(pending[p]):
            if rnd.random() < 0.5:
                logs[p].append(("ack", a))
                pending[p].remove(a)
    for p in range(n_parts):
        for a in pending[p]:
            if rnd.random() < 0.7:
                logs[p].append(("ack", a))
    sends: dict[int, list[tuple[int, str, int | None]]] = {}
    for p, log in logs.items():
        ack_at = {mid: o for o, (k, mid) in enumerate(log) if k == "ack"}
        sends[p] = [(o, mid, ack_at.get(mid)) for o, (k, mid) in enumerate(log) if k == "send"]
    # ---- replicas over time --------------------------------------------------------------
    steps = rnd.randint(2, 8)
    nodes = [f"n{i}" for i in range(rnd.randint(2, 4))]
    for p in range(n_parts):
        k = rnd.randint(1, min(3, len(nodes)))
        h.owners[p] = sorted(rnd.sample(nodes, k))
    ends = {p: sorted(rnd.randint(0, len(logs[p])) for _ in range(steps)) + [len(logs[p])]
            for p in range(n_parts)}
    held = {(n, p): set[int]() for p in range(n_parts) for n in h.owners[p]}
    last_cut = dict.fromkeys(held, 0)
    last_gc = dict.fromkeys(held, 0)
    cut_hist: dict[int, list[int]] = {p: [] for p in range(n_parts)}
    stable_ms: dict[tuple[int, int], int] = {}
    down: set[str] = set()
    for t in range(steps + 1):
        if t and rnd.random() < 0.3:
            who = rnd.choice(nodes)
            if who in down:
                down.discard(who)
                h.events.append(Event(t * 1000 - 1, "heal", {"node": who}))
            else:
                down.add(who)
                h.events.append(Event(t * 1000 - 1, "isolate", {"node": who}))
        for (n, p), have in held.items():
            end = ends[p][t]
            if t == steps:
                have |= set(range(end))
            elif n not in down:
                base = _base_end(have)
                have |= set(range(base, rnd.randint(base, max(base, end))))
                if end - base > 2 and rnd.random() < 0.3:
                    lo = rnd.randint(base + 1, end - 1)
                    have |= set(range(lo, rnd.randint(lo, end)))
        for p in range(n_parts):
            cut_hist[p].append(min(_base_end(held[(n, p)]) for n in h.owners[p]))
            for o, _mid, a in sends[p]:
                if a is not None and a < cut_hist[p][-1]:
                    stable_ms.setdefault((p, o), t * 1000)
        for i, n in enumerate(nodes):
            parts: dict[int, PartitionSample] = {}
            for p in range(n_parts):
                if (n, p) not in held:
                    continue
                lag = rnd.randint(0, 1)
                trim = rnd.random() < 0.5
                c = max(last_cut[(n, p)], cut_hist[p][max(0, t - lag)])
                first_unacked = next((o for o, _m, a in sends[p] if a is None or a >= c),
                                     len(logs[p]))
                appended = ends[p][t]
                if gc_mode == "correct":
                    g = min(c, first_unacked)
                elif gc_mode == "ignore_cut":
                    g = next((o for o, _m, a in sends[p] if a is None or a >= appended),
                             appended)
                else:
                    g = c
                g = max(last_gc[(n, p)], g)
                last_cut[(n, p)], last_gc[(n, p)] = c, g
                parts[p] = PartitionSample(_ranges(held[(n, p)], g if trim else 0), c, g)
            if parts and (t == steps or rnd.random() < 0.9):
                h.samples.append(Sample(t * 1000 + i, n, parts))
    for p in range(n_parts):
        h.acks[p] = [SendAck(o, mid, a, stable_ms.get((p, o)) if rnd.random() < 0.7 else None)
                     for o, mid, a in sends[p]]
    # ---- after healing -------------------------------------------------------------------
    healed = steps * 1000 + 500
    h.events.append(Event(healed, "heal", {"all": True}))
    for p in range(n_parts):
        digest = f"{zlib.crc32(repr(logs[p]).encode()):08x}"
        for n in h.owners[p]:
            h.final.nodes.setdefault(n, {})[p] = FinalPartition(
                normalise([(0, len(logs[p]))]), digest)
        owners = h.owners[p]
        for i, a in enumerate(owners):
            for b in owners[i + 1:]:
                h.final.pairs.append(Convergence(p, (a, b), healed,
                                                 healed + rnd.randint(0, 5000)))
    return h
