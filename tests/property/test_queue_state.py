"""Hypothesis: the per-message queue state against a dictionary model.

The model applies one event at a time and keeps the whole history (no expiry bookkeeping, no
pruning). The implementation (:func:`tidemark.spark_streaming.transform.apply_batch` over
:class:`~tidemark.spark_streaming.state_layout.MemoryMaps`, the same rows Spark's MapStates hold) sees
the same events of several peers cut into random batches, restarted from a copy of its state
between some batches as a job restarted from its checkpoint would be. After every batch:

* the compacted view built from its upserts and tombstones equals the model's queues;
* its queued entries equal the model's (with the Send offsets) and its memories that have
  not expired equal the model's, with the same expiry;
* re-running the batch from the same starting state gives the same changes and state;
* memories do expire and leave the state: nothing outlives its window for long;
* delivery counts: every DeliveryFailed of a queued id adds one to its count, on the entry and
  on every upsert; at the limit the id leaves the queue as exactly one dead letter (count, last
  reason, Send offset) and is remembered like an early ack, so a duplicate Send stays out;
* early failures: the failures of an id not known yet (logged before its Send) are
  remembered like an early ack and counted when the Send comes (dead-lettered then, at the
  limit or after a terminal one); an Ack of the id forgets them.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.log.queue_state import (
    ACK,
    EARLY,
    FAIL,
    PURGE,
    SEND,
    Entry,
    Event,
    PeerMeta,
    Ttl,
    is_progress_key,
    plan_events,
    progress_key,
    queue_key,
    split_queue_key,
)
from tidemark.spark_streaming.state_layout import MemoryMaps
from tidemark.spark_streaming.transform import apply_batch


class DictModel:
    """Unacked messages of one peer, one event at a time, from first principles."""

    def __init__(self, ack_ttl_ms: int, dedup_ms: int, limit: int = 5) -> None:
        self.ack_ttl_ms, self.dedup_ms, self.limit = ack_ttl_ms, dedup_ms, limit
        self.queue: dict[str, int] = {}
        self.counts: dict[str, int] = {}  # failed deliveries of each queued id
        self.letters: list[tuple[str, int, int, str]] = []  # (id, Send offset, count, reason)
        self.clock = 0
        self.dropped: list[tuple[str, int]] = []  # (message id, remembered until)
        #: failures before the Send: id -> (count, any terminal, last reason, until)
        self.early: dict[str, tuple[int, bool, str, int]] = {}

    def _cancelled(self, mid: str) -> bool:
        return any(m == mid and until > self.clock for m, until in self.dropped)

    def _early(self, mid: str) -> tuple[int, bool, str, int] | None:
        got = self.early.get(mid)
        return got if got is not None and got[3] > self.clock else None

    def apply(self, ev: Event) -> None:
        self.clock = max(self.clock, ev.timestamp_ms)
        mid = ev.message_id
        if ev.kind == SEND:
            if mid not in self.queue and not self._cancelled(mid):
                early = self._early(mid)
                self.early.pop(mid, None)
                count, terminal, reason, _ = early or (0, False, "", 0)
                if count >= self.limit or terminal:
                    self.letters.append((mid, ev.offset, count, reason))
                    self.dropped.append((mid, self.clock + self.ack_ttl_ms))
                    return
                self.queue[mid] = ev.offset
                self.counts[mid] = count
        elif ev.kind == FAIL:
            rec = ev.record or {}
            if mid not in self.queue and not self._cancelled(mid):
                count, terminal, _, _ = self._early(mid) or (0, False, "", 0)
                self.early[mid] = (count + 1, terminal or bool(rec.get("terminal")),
                                   rec["reason"], self.clock + self.ack_ttl_ms)
            elif ev.message_id in self.queue:
                self.counts[ev.message_id] += 1
                if self.counts[ev.message_id] >= self.limit or (ev.record or {}).get("terminal"):
                    reason = (ev.record or {})["reason"]
                    self.letters.append((ev.message_id, self.queue.pop(ev.message_id),
                                         self.counts[ev.message_id], reason))
                    self.dropped.append((ev.message_id, self.clock + self.ack_ttl_ms))
        elif ev.kind == ACK:
            self.early.pop(mid, None)
            early = ev.message_id not in self.queue
            self.queue.pop(ev.message_id, None)
            keep = self.ack_ttl_ms if early else self.dedup_ms
            self.dropped.append((ev.message_id, self.clock + keep))
        else:
            self.dropped += [(m, self.clock + self.dedup_ms) for m in self.queue]
            self.queue.clear()

    def memories(self) -> dict[str, int]:
        """Remembered ids that have not expired, with their (longest) expiry."""
        out: dict[str, int] = {}
        for mid, until in self.dropped:
            if until > self.clock and mid not in self.queue:
                out[mid] = max(out.get(mid, 0), until)
        for mid, (_, _, _, until) in self.early.items():
            if until > self.clock:
                out[mid] = max(out.get(mid, 0), until)
        return out


Case = tuple[list[tuple[str, Event]], list[int], tuple[int, int, int], list[bool]]


@st.composite
def streams(draw: st.DrawFn) -> Case:
    """Events of 1-3 peers (sends, duplicate sends, acks before/after, purges), batch cuts,
    lifetimes, and where the job restarts from its checkpoint."""
    peers = [f"p{i}" for i in range(draw(st.integers(1, 3)))]
    ids = [f"m{i}" for i in range(draw(st.integers(1, 8)))]
    n = draw(st.integers(0, 80))
    events, ts = [], 0
    for offset in range(n):
        ts = max(0, ts + draw(st.integers(-3, 10)))  # producers' clocks are not in sync
        kind = draw(st.sampled_from([SEND, SEND, SEND, ACK, ACK, PURGE, FAIL, FAIL, FAIL]))
        mid = draw(st.sampled_from(ids)) if kind != PURGE else ""
        record = {"message_id": mid, "payload": b"x"} if kind == SEND else \
            {"message_id": mid, "reason": f"r{offset}",  # a terminal one: the handler's term
             "terminal": draw(st.sampled_from([False, False, False, True]))} \
            if kind == FAIL else None
        events.append((draw(st.sampled_from(peers)), Event(kind, offset, ts, mid, record)))
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=12))) | {n})
    ttls = (draw(st.sampled_from([0, 1, 5, 20, 10**9])), draw(st.sampled_from([0, 3, 10, 10**9])),
            draw(st.sampled_from([1, 2, 3, 5])))
    restarts = draw(st.lists(st.booleans(), min_size=len(cuts), max_size=len(cuts)))
    return events, cuts, ttls, restarts


def _batch(maps: MemoryMaps, batch: list[tuple[str, Event]], ttl: Ttl) -> dict:
    grouped: dict[str, list[Event]] = {}
    for peer, ev in batch:
        grouped.setdefault(peer, []).append(ev)
    return apply_batch(maps, grouped, ttl) if grouped else {}


def _entries(maps: MemoryMaps) -> dict[tuple[str, str], Entry]:
    return maps.entries()


@settings(max_examples=500, deadline=None)
@given(streams())
def test_batches_and_restarts_match_dict_model(case: Case) -> None:
    events, cuts, (ack_ttl, dedup, limit), restarts = case
    ttl = Ttl(ack_ttl, dedup, limit)
    models: dict[str, DictModel] = {}
    view: dict[tuple[str, str], int] = {}  # compacted queues: (peer, message id) -> offset
    counts: dict[tuple[str, str], int] = {}  # compacted queues: the entries' delivery_count
    letters: dict[str, list[tuple[str, int, int, str]]] = {}
    maps = MemoryMaps()
    start = 0
    for cut, restart in zip(cuts, restarts, strict=True):
        batch = events[start:cut]
        if restart:
            maps = maps.snapshot()  # a new job reading its checkpoint
        again = maps.snapshot()
        changes = _batch(maps, batch, ttl)
        assert _batch(again, batch, ttl) == changes  # a re-run batch writes the same rows
        assert again.data == maps.data
        for peer, peer_changes in changes.items():
            assert len({c.message_id for c in peer_changes}) == len(peer_changes)  # one per key
            for change in peer_changes:
                for x in change.letters:
                    letters.setdefault(peer, []).append(
                        (x.message_id, x.send_offset, x.delivery_count, x.reason))
                if change.upsert:
                    if change.send is not None:
                        assert change.send.kind == SEND
                        assert change.send.offset == change.send_offset
                    else:  # only the count changed: the Send is already in the view
                        assert view[(peer, change.message_id)] == change.send_offset
                    view[(peer, change.message_id)] = change.send_offset
                    counts[(peer, change.message_id)] = change.delivery_count
                else:
                    view.pop((peer, change.message_id), None)
                    counts.pop((peer, change.message_id), None)
        for peer, ev in batch:
            models.setdefault(peer, DictModel(ack_ttl, dedup, limit)).apply(ev)
        expected = {(p, m): o for p, model in models.items() for m, o in model.queue.items()}
        assert view == expected
        assert counts == {(p, m): c for p, model in models.items()
                          for m, c in model.counts.items() if m in model.queue}
        assert {p: sorted(x) for p, x in letters.items()} == {  # a batch's: in key order
            p: sorted(model.letters) for p, model in models.items() if model.letters}
        stored = _entries(maps)
        assert {k: e.offset for k, e in stored.items() if e.queued} == expected
        assert {k: e.delivery_count for k, e in stored.items() if e.queued} == counts
        for peer, model in models.items():
            meta = maps.metas()[peer]
            assert meta.clock == model.clock and meta.queued == len(model.queue)
            live = {m: e.until for (p, m), e in stored.items()
                    if p == peer and not e.queued and e.until > model.clock}
            assert live == model.memories()
        start = cut


@settings(max_examples=200, deadline=None)
@given(streams())
def test_memories_leave_the_state(case: Case) -> None:
    """Once every window has passed (a later record of each peer), only the queued entries,
    the metas and no expiry chunk remain."""
    events, cuts, (ack_ttl, dedup, limit), _ = case
    ttl = Ttl(ack_ttl, dedup, limit)
    maps = MemoryMaps()
    for start, cut in zip([0, *cuts], cuts, strict=False):
        _batch(maps, events[start:cut], ttl)
    end = max((ev.timestamp_ms for _, ev in events), default=0) + 2 * 10**9 + 1
    peers = sorted({p for p, _ in events})
    for i in range(20):  # each batch pops at most GC_CHUNKS chunks per FIFO
        _batch(maps, [(p, Event(SEND, 10**6 + i, end, f"late-{p}", {})) for p in peers], ttl)
    assert all(e.queued for e in _entries(maps).values())
    assert maps.chunk_count() == 0
    assert all(m.fifos[0].empty and m.fifos[1].empty for m in maps.metas().values())


def test_batch_cost_does_not_grow_with_a_backlog() -> None:
    """The same batch costs the same state operations with 10 or 20,000 queued messages for a
    down peer, and never scans the whole state."""
    costs = []
    for backlog in (10, 20_000):
        maps = MemoryMaps()
        down = [("down", Event(SEND, i, 1000, f"b{i}", {})) for i in range(backlog)]
        _batch(maps, down, Ttl())
        batch = [("down", Event(SEND, backlog + i, 2000, f"n{i}", {})) for i in range(50)]
        batch += [("up", Event(SEND, backlog + 50 + i, 2000, f"u{i}", {})) for i in range(50)]
        batch += [("up", Event(ACK, backlog + 100 + i, 2001, f"u{i}")) for i in range(25)]
        batch += [("down", Event(ACK, backlog + 125, 2002, "b3"))]
        maps.ops = 0
        changes = _batch(maps, batch, Ttl())
        assert len(changes["down"]) == 51 and len(changes["up"]) == 25
        assert maps.scanned == 0
        costs.append(maps.ops)
    assert costs[0] == costs[1] and costs[0] < 8 * 126


def test_early_ack_cancels_later_send_and_duplicates_count_once() -> None:
    ttl = Ttl(1000, 100)
    writes = plan_events(None, {}, [
        Event(ACK, 0, 10, "a"), Event(SEND, 1, 11, "a", {}), Event(SEND, 2, 12, "b", {}),
        Event(SEND, 3, 13, "b", {})], ttl)
    assert [(c.message_id, c.upsert, c.send.offset if c.send else None)
            for c in writes.changes] == [("b", True, 2)]
    assert writes.writes == {"a": Entry(False, until=1010), "b": Entry(True, offset=2)}
    assert writes.meta.fifos[EARLY].tail == 1 and writes.meta.queued == 1
    maps = MemoryMaps()
    assert _batch(maps, [("p", Event(ACK, 0, 10, "a")), ("p", Event(SEND, 1, 11, "a", {})),
                         ("p", Event(SEND, 2, 12, "b", {}))], ttl)["p"][0].message_id == "b"
    assert not _batch(maps, [("p", Event(PURGE, 4, 14))], ttl)["p"][0].upsert
    assert _batch(maps, [("p", Event(SEND, 5, 15, "b", {}))], ttl) == {"p": []}  # purged
    _batch(maps, [("p", Event(SEND, 6, 500, "z", {}))], ttl)
    assert {m for (_, m), e in _entries(maps).items() if not e.queued} == {"a"}  # b expired
    _batch(maps, [("p", Event(ACK, 7, 600, "z"))], ttl)
    _batch(maps, [("p", Event(SEND, 8, 5000, "y", {}))], ttl)
    assert set(_entries(maps)) == {("p", "y")}  # every memory left the state
    assert _batch(maps, [("p", Event(SEND, 9, 5001, "a", {}))], ttl)["p"][0].upsert


def test_meta_and_keys() -> None:
    assert PeerMeta().empty
    assert split_queue_key(queue_key("peer/1", "m:2")) == ("peer/1", "m:2")
    assert is_progress_key(progress_key(3)) and not is_progress_key(queue_key("p", "m"))


def test_failures_count_exactly_then_dead_letter_and_block_duplicates() -> None:
    """Counts on upserts, one letter at the limit with the last reason, a failure of an id that
    is not known yet waits for its Send, and a duplicate Send of the dead id is not queued
    again."""
    ttl = Ttl(1000, 100, 3)
    maps = MemoryMaps()

    def fail(off: int, mid: str, why: str) -> tuple[str, Event]:
        return ("p", Event(FAIL, off, 20 + off, mid, {"reason": why}))

    first = _batch(maps, [("p", Event(SEND, 0, 10, "a", {})), fail(1, "a", "boom-1"),
                          fail(2, "ghost", "not queued")], ttl)["p"]
    assert [(c.message_id, c.upsert, c.delivery_count) for c in first] == [("a", True, 1)]
    assert first[0].send is not None and not first[0].letters
    second = _batch(maps, [fail(3, "a", "boom-2")], ttl)["p"]
    assert [(c.upsert, c.send, c.send_offset, c.delivery_count) for c in second] == [
        (True, None, 0, 2)]
    third = _batch(maps, [fail(4, "a", "boom-3"), fail(5, "a", "too late"),
                          ("p", Event(SEND, 6, 30, "a", {}))], ttl)["p"]
    assert len(third) == 1 and not third[0].upsert
    (letter,) = third[0].letters
    assert (letter.send_offset, letter.delivery_count, letter.reason, letter.fail_offset) == (
        0, 3, "boom-3", 4)
    assert maps.entries()[("p", "a")] == Entry(False, until=24 + 1000)
    assert maps.metas()["p"].queued == 0


@settings(max_examples=300, deadline=None)
@given(streams())
def test_the_in_memory_fold_matches_the_dict_model(case: Case) -> None:
    """:class:`~tidemark.log.queue_fold.QueueFold` (the test double's and the tests' oracle's
    queues) over the same events cut into the same batches: the model's queues, delivery
    counts and dead letters."""
    from tidemark.log.queue_fold import QueueFold

    events, cuts, (ack_ttl, dedup, limit), _ = case
    fold, models = QueueFold(Ttl(ack_ttl, dedup, limit)), {}
    start = 0
    for cut in cuts:
        grouped: dict[str, list[Event]] = {}
        for peer, ev in events[start:cut]:
            grouped.setdefault(peer, []).append(ev)
            models.setdefault(peer, DictModel(ack_ttl, dedup, limit)).apply(ev)
        for peer, batch in grouped.items():
            fold.apply(peer, batch)
        start = cut
    for peer, model in models.items():
        assert [(send.message_id, send.offset, entry.delivery_count)
                for send, entry in fold.queue(peer)] == sorted(
            ((m, o, model.counts[m]) for m, o in model.queue.items()), key=lambda t: t[1])
        assert sorted((let.message_id, let.send_offset, let.delivery_count, let.reason)
                      for let in fold.letters(peer)) == sorted(model.letters)


def test_failures_before_their_send_count_when_it_comes() -> None:
    """A direct delivery's failures can reach txlog before its Send: remembered, then counted
    on the Send (dead-lettered at once after a terminal one or at the limit); an Ack of the
    id forgets them; the state layout keeps them across batches."""
    ttl = Ttl(1000, 100, 3)
    maps = MemoryMaps()

    def fail(off: int, mid: str, why: str, terminal: bool = False) -> tuple[str, Event]:
        return ("p", Event(FAIL, off, 20 + off, mid, {"reason": why, "terminal": terminal}))

    def send(off: int, mid: str) -> tuple[str, Event]:
        return ("p", Event(SEND, off, 20 + off, mid, {}))

    assert _batch(maps, [fail(0, "a", "early-1"), fail(1, "t", "stop", True),
                         fail(2, "k", "acked")], ttl) == {"p": []}
    early = maps.entries()[("p", "t")]
    assert early.failed_early and early.terminal and early.reason == "stop"
    assert not early.blocks_send(21)
    got = _batch(maps, [send(3, "a"), send(4, "t"), ("p", Event(ACK, 5, 25, "k")),
                        send(6, "k")], ttl)["p"]
    by_id = {c.message_id: c for c in got}
    assert by_id["a"].upsert and by_id["a"].delivery_count == 1
    (letter,) = by_id["t"].letters
    assert not by_id["t"].upsert and (letter.send_offset, letter.delivery_count,
                                      letter.reason, letter.fail_offset) == (4, 1, "stop", 1)
    assert "k" not in by_id  # acked before its Send: the failure is forgotten, the Send dropped
    more = _batch(maps, [fail(7, "b", "x"), fail(8, "b", "y"), fail(9, "b", "z")], ttl)
    assert more == {"p": []}
    (dead,) = _batch(maps, [send(10, "b")], ttl)["p"]
    assert [(x.delivery_count, x.reason) for x in dead.letters] == [(3, "z")]
    assert maps.metas()["p"].queued == 1  # only "a"


@st.composite
def purged_streams(draw: st.DrawFn) -> tuple[list[Event], int]:
    """One peer's txlog events (sends, duplicates, acks before and after) and the offset an
    operator's Purge reaches."""
    ids = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    events = []
    for offset in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from([SEND, SEND, SEND, ACK]))
        record = {"message_id": "", "payload": b"x"} if kind == SEND else None
        mid = draw(st.sampled_from(ids))
        events.append(Event(kind, offset, offset, mid, record and {**record, "message_id": mid}))
    return events, draw(st.integers(0, len(events)))


@settings(max_examples=300, deadline=None)
@given(purged_streams(), st.integers(0, 3))
def test_a_purge_read_before_the_sends_it_reaches_leaves_the_same_queue(
        case: tuple[list[Event], int], cut: int) -> None:
    """Purges come from a topic of their own, so the job may read one before, among or after
    the Sends it reaches: the queue comes out the same as with the Purge at its position."""
    events, below = case
    purge = Event(PURGE, below, below)
    ttl = Ttl(10**9, 10**9, 5)
    at_position = [e for e in events if e.offset < below] + [purge] + \
        [e for e in events if e.offset >= below]
    early = min(cut, len(events))  # the Purge read after `early` events
    read_first = events[:early] + [purge] + events[early:]
    queues = []
    for order in (at_position, read_first):
        maps = MemoryMaps()
        apply_batch(maps, {"p": order}, ttl)
        queues.append({m for (p, m), e in _entries(maps).items() if e.queued})
    assert queues[0] == queues[1]
    assert all(e.offset >= below for e in events if e.kind == SEND
               and e.message_id in queues[1])
