"""Held-back live messages during replay (``peer_client.held`` through the real ``Inbox``),
against a model: whatever the interleaving of live arrivals (held back) and logged copies
(replay and handover), and however small the dedup window, every message is handed to a
handler exactly once in the incarnation; each sender's logged messages keep txlog order and
a held message whose logged copy never came goes after them; the held list never holds
more than its bounds, and what does not fit is refused, not lost (it comes through the
log)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client import message
from tidemark.peer_client.context import Phase
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.handlers import HandlerRegistry
from tidemark.peer_client.held import HeldBack
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.jobs import Job, RunJob
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.records import Envelope


@message("prop.Held")
@dataclass
class Held:
    n: int


_PAYLOAD = {n: message_type_of(Held).serializer.encode(Held(n)) for n in range(64)}


def _env(n: int, replay: bool, persistent: bool = True) -> Envelope:
    return Envelope(f"m{n}", f"S{n % 3}", "prop.Held", _PAYLOAD[n], 0, persistent, "test",
                    replay=replay)


def _inbox(handled: list[str], window: int, limit: int, limit_bytes: int) -> Inbox:
    def submit(key: str, job: Job | RunJob) -> None:
        job.run()

    reg = HandlerRegistry()
    reg.add(lambda msg: None, Held)
    inbox = Inbox("B", "test", reg, DedupWindow(window), submit, lambda *a: None,
                  lambda env: handled.append(env.message_id), Counter(), None,
                  lambda key, jobs: [j.run() for j in jobs],
                  lambda envs: handled.extend(e.message_id for e in envs),
                  limit, limit_bytes)
    inbox.phase = Phase.REPLAY
    return inbox


# An event: ("live", n) a direct delivery of message n (refused when the held list is full:
# then it is logged unmarked, i.e. it will only come as a logged copy), ("log", n) its
# logged copy goes by in the replay or the handover (a batch of one or more).
events = st.lists(st.tuples(st.sampled_from(["live", "log"]), st.integers(0, 40)),
                  max_size=120)


@settings(max_examples=300, deadline=None)
@given(events, st.integers(1, 4), st.integers(1, 12), st.integers(1, 400), st.booleans())
def test_each_message_is_handled_once_whatever_the_window(
        evs: list[tuple[str, int]], window: int, limit: int, limit_bytes: int,
        batched: bool) -> None:
    handled: list[str] = []
    inbox = _inbox(handled, window, limit, limit_bytes)
    arrived: set[int] = set()     # the model: messages that reached the peer at all
    logged: list[int] = []        # logged copies in txlog order (first time each)
    refused: list[int] = []       # refused live: the sender logs them unmarked

    def log_copy(n: int) -> None:
        arrived.add(n)
        if n not in logged:
            logged.append(n)
        env = _env(n, replay=True)
        if batched:
            inbox.accept_many([env])
        else:
            inbox.accept(env)

    for kind, n in evs:
        if kind == "live":
            if n in arrived:
                continue  # delivered directly once, before its logged copy
            arrived.add(n)
            if inbox.hold_room(1, len(_PAYLOAD[n]), [f"m{n}"]):
                inbox.accept(_env(n, replay=False))
            else:
                refused.append(n)
            assert len(inbox.held) <= max(limit, 1)
            assert inbox.held.bytes <= max(limit_bytes, max(len(p) for p in _PAYLOAD.values()))
        elif n not in logged:  # (a copy read twice, by a retry, is the dedup window's case)
            log_copy(n)
    # the handover waits for every held or refused message's logged copy
    assert inbox.held_unseen() == len(inbox.held) + len([n for n in refused if n not in logged])
    for n in refused:  # the handover reads them from the log before the release
        if n not in logged:
            log_copy(n)
    assert inbox.held_unseen() == len(inbox.held)
    inbox.release(Phase.NORMAL)
    counts = Counter(handled)
    assert set(counts) == {f"m{n}" for n in arrived}, "lost (or invented) a message"
    assert max(counts.values(), default=1) == 1, f"handled twice: {counts.most_common(1)}"
    # every logged message is handled in txlog order, before any held one that never logged
    order = [int(m[1:]) for m in handled]
    logged_order = [n for n in order if n in logged]
    assert logged_order == logged
    assert not inbox.held and inbox.phase is Phase.NORMAL


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "seen"]), st.integers(0, 20),
                          st.integers(0, 50)), max_size=80),
       st.integers(1, 10), st.integers(1, 200))
def test_held_back_counts_match_a_model(ops: list[tuple[str, int, int]], limit: int,
                                        limit_bytes: int) -> None:
    """HeldBack against a dict: counts, bytes, peaks and arrival order."""
    held, model = HeldBack(limit, limit_bytes), {}
    peak = peak_bytes = 0
    for op, n, size in ops:
        mid = f"m{n}"
        if op == "add":
            env = Envelope(mid, "S", "prop.Held", b"x" * size, 0, True, "test")
            fits = not model or (len(model) + 1 <= limit
                                 and sum(model.values()) + size <= limit_bytes)
            assert held.room(1, size) == fits
            assert held.add(env) == (mid not in model)
            model.setdefault(mid, size)
        else:
            assert held.seen(mid) == (mid in model)
            model.pop(mid, None)
        peak = max(peak, len(model))
        peak_bytes = max(peak_bytes, sum(model.values()))
        doc = held.status()
        assert (doc["messages"], doc["bytes"]) == (len(model), sum(model.values()))
        assert (doc["peak_messages"], doc["peak_bytes"]) == (peak, peak_bytes)
        assert [e.message_id for e in held.envelopes()] == list(model)
    assert [e.message_id for e in held.take()] == list(model) and not held


# A sender's message either reaches the peer directly (held during replay, or handled) with
# its logged copy marked for this incarnation, or is refused (the held list is full) or its
# direct call fails, and it is only logged, unmarked. After a failed call the sender's next
# direct batch carries the offset of its last unmarked Send (``log_floor``). The follower
# reads txlog in order: while catching up it dispatches every Send, once the peer is normal
# only the unmarked ones, and reports how far it got. ("send", s), ("fail", s) s's next
# direct call fails, ("read", _) the next txlog entry, ("switch", _) the replay ends (at any
# moment: the handover may give up)
order_events = st.lists(st.tuples(st.sampled_from(["send", "send", "fail", "read", "switch"]),
                                  st.integers(0, 2)), max_size=150)


@settings(max_examples=400, deadline=None)
@given(order_events, st.integers(1, 6), st.booleans())
def test_each_senders_order_holds_across_refusals_and_the_switch(
        evs: list[tuple[str, int]], limit: int, batched: bool) -> None:
    handled: list[str] = []
    inbox = _inbox(handled, 1000, limit, 1 << 20)
    sent: dict[int, list[str]] = {0: [], 1: [], 2: []}
    txlog: list[tuple[Envelope, bool]] = []  # (logged copy, marked direct)
    read = 0
    switched = False

    def read_next() -> None:
        nonlocal read
        env, marked = txlog[read]
        read += 1
        if not (switched and marked):  # else: delivered directly, the follower skips it
            if batched:
                inbox.accept_many([env])
            else:
                inbox.accept(env)
        inbox.log_position(read)

    floor: dict[int, int] = {}  # sender: offset of its last unmarked Send after a failure
    for kind, s in evs:
        if kind == "fail":
            mid = f"S{s}-{len(sent[s])}"
            sent[s].append(mid)
            payload = _PAYLOAD[len(sent[s]) % 64]
            floor[s] = len(txlog)
            txlog.append((Envelope(mid, f"S{s}", "prop.Held", payload, 0, True, "test",
                                   replay=True), False))
        elif kind == "send":
            mid = f"S{s}-{len(sent[s])}"
            sent[s].append(mid)
            payload = _PAYLOAD[len(sent[s]) % 64]
            live = Envelope(mid, f"S{s}", "prop.Held", payload, 0, True, "test")
            logged = Envelope(mid, f"S{s}", "prop.Held", payload, 0, True, "test",
                              replay=True)
            if inbox.hold_room(1, len(payload), [mid], f"S{s}"):
                if s in floor:
                    inbox.wait_for_log(f"S{s}", floor.pop(s))
                inbox.accept(live)
                txlog.append((logged, True))
            else:
                txlog.append((logged, False))  # refused: the sender logs it unmarked
        elif kind == "read" and read < len(txlog):
            read_next()
        elif kind == "switch" and not switched:
            switched = True
            inbox.release(Phase.NORMAL)
    if not switched:
        switched = True
        inbox.release(Phase.NORMAL)
    while read < len(txlog):
        read_next()
    counts = Counter(handled)
    everything = [m for ms in sent.values() for m in ms]
    assert set(counts) == set(everything), "lost (or invented) a message"
    assert max(counts.values(), default=1) == 1, f"handled twice: {counts.most_common(1)}"
    for s, ms in sent.items():
        assert [m for m in handled if m.startswith(f"S{s}-")] == ms, f"S{s} out of order"
    assert not inbox.held and not inbox.held.gates


def test_a_floor_gate_waits_for_the_follower_however_long() -> None:
    """A refused copy that never comes opens its sender's gate after the wait; a floor (the
    sender's earlier messages are confirmed in txlog) opens only when the follower passes
    it: opening it on time hands the sender's later messages over first."""
    held = HeldBack(100, 1 << 20)
    held.gate_floor("S1", 500, now=0.0)
    held.refuse(1, ["r1"], "S2", now=0.0)
    assert held.expire(100.0, 30.0) == ["S2"]
    assert held.gated("S1") and not held.gated("S2")
    held.pass_floor(500)
    assert held.gated("S1")
    held.pass_floor(501)
    assert not held.gated("S1") and "S1" in held.opened


def test_a_direct_batch_behind_a_floor_goes_right_after_it_in_the_followers_batch() -> None:
    """S1's direct batch waits for offset 5 (its earlier messages took the log); the
    follower's next batch holds S1's Sends at 3 and 5 and a later one at 8 (logged after
    another failed call): the direct message runs after 5 and before 8."""
    from tidemark.peer_client.replay.follower import dispatch_by_floors

    handled: list[str] = []
    inbox = _inbox(handled, 100, 100, 1 << 20)
    inbox.release(Phase.NORMAL)

    def env(mid: str, replay: bool, offset: int = -1) -> Envelope:
        return Envelope(mid, "S1", "prop.Held", _PAYLOAD[1], 0, True, "test", 0, replay, 0,
                        offset)

    assert inbox.wait_for_log("S1", 5)
    inbox.accept(env("live", False))
    assert handled == []  # held behind the floor
    logged = [env("a", True, 3), env("b", True, 5), env("c", True, 8)]
    dispatch_by_floors(logged, inbox, inbox.accept_many)
    assert handled == ["a", "b", "live", "c"]
