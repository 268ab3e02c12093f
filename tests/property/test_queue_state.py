"""Hypothesis: the pure queue state against a dictionary model over random interleavings.

The model applies one event at a time and keeps the whole history (no pruning); the
implementation sees the same events cut into random batches, with its state serialized
between batches as Spark's state store does. The compacted view built from the
implementation's upserts and tombstones must equal the model's unacked set after every
batch, and re-applying a batch from the same starting state must give the same changes.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings, strategies as st

from spark_streaming.queue_state import (ACK, PURGE, SEND, Event, PeerState, apply_events,
                                         is_progress_key, progress_key, queue_key,
                                         split_queue_key)


class DictModel:
    """Unacked messages of one peer, one event at a time, from first principles."""

    def __init__(self, ack_ttl_ms: int, dedup_ms: int) -> None:
        self.ack_ttl_ms, self.dedup_ms = ack_ttl_ms, dedup_ms
        self.queue: dict[str, int] = {}
        self.clock = 0
        self.dropped: list[tuple[str, int]] = []  # (message id, remembered until)

    def _cancelled(self, mid: str) -> bool:
        return any(m == mid and until > self.clock for m, until in self.dropped)

    def apply(self, ev: Event) -> None:
        self.clock = max(self.clock, ev.timestamp_ms)
        if ev.kind == SEND:
            if ev.message_id not in self.queue and not self._cancelled(ev.message_id):
                self.queue[ev.message_id] = ev.offset
        elif ev.kind == ACK:
            early = ev.message_id not in self.queue
            self.queue.pop(ev.message_id, None)
            keep = self.ack_ttl_ms if early else self.dedup_ms
            self.dropped.append((ev.message_id, self.clock + keep))
        else:
            self.dropped += [(m, self.clock + self.dedup_ms) for m in self.queue]
            self.queue.clear()


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Event], list[int], tuple[int, int]]:
    """Events of one peer (sends, duplicate sends, acks before/after, purges) and batch cuts."""
    ids = [f"m{i}" for i in range(draw(st.integers(1, 8)))]
    n = draw(st.integers(0, 60))
    events, ts = [], 0
    for offset in range(n):
        ts = max(0, ts + draw(st.integers(-3, 10)))  # producers' clocks are not in sync
        kind = draw(st.sampled_from([SEND, SEND, SEND, ACK, ACK, PURGE]))
        mid = draw(st.sampled_from(ids)) if kind != PURGE else ""
        record = {"message_id": mid, "payload": b"x"} if kind == SEND else None
        events.append(Event(kind, offset, ts, mid, record))
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=10))) | {n})
    ttls = (draw(st.sampled_from([0, 1, 5, 20, 10**9])), draw(st.sampled_from([0, 3, 10, 10**9])))
    return events, cuts, ttls


@settings(max_examples=400, deadline=None)
@given(streams())
def test_batches_match_dict_model(case: tuple[list[Event], list[int], tuple[int, int]]) -> None:
    events, cuts, (ttl, dedup) = case
    model = DictModel(ttl, dedup)
    view: dict[str, int] = {}  # the compacted queues view: message id -> Send offset
    blob = PeerState().to_bytes()
    start = 0
    for cut in cuts:
        batch = events[start:cut]
        before = PeerState.from_bytes(blob)
        state = copy.deepcopy(before)
        changes = apply_events(state, batch, ttl, dedup)
        replay = copy.deepcopy(before)
        assert apply_events(replay, batch, ttl, dedup) == changes  # a re-run batch writes the same
        assert len({c.message_id for c in changes}) == len(changes)  # one row per key
        for change in changes:
            if change.upsert:
                assert change.send is not None and change.send.kind == SEND
                view[change.message_id] = change.send.offset
            else:
                view.pop(change.message_id, None)
        for ev in batch:
            model.apply(ev)
        assert view == model.queue
        assert state.queue == model.queue
        blob = state.to_bytes()
        start = cut


@settings(max_examples=200, deadline=None)
@given(streams())
def test_state_holds_only_unacked_and_unexpired(
        case: tuple[list[Event], list[int], tuple[int, int]]) -> None:
    events, _, (ttl, dedup) = case
    state = PeerState()
    apply_events(state, events, ttl, dedup)
    assert all(until > state.clock for until in state.remembered.values())
    assert all(until <= state.clock + max(ttl, dedup) for until in state.remembered.values())


def test_early_ack_cancels_later_send_and_duplicates_count_once() -> None:
    state = PeerState()
    changes = apply_events(state, [
        Event(ACK, 0, 10, "a"), Event(SEND, 1, 11, "a", {}), Event(SEND, 2, 12, "b", {}),
        Event(SEND, 3, 13, "b", {})], 1000, 100)
    assert [(c.message_id, c.upsert, c.send.offset if c.send else None) for c in changes] \
        == [("b", True, 2)]
    assert apply_events(state, [Event(PURGE, 4, 14)], 1000, 100)[0].upsert is False
    assert state.queue == {}
    assert apply_events(state, [Event(SEND, 5, 15, "b", {})], 1000, 100) == []  # purged
    apply_events(state, [Event(SEND, 6, 500, "z", {})], 1000, 100)
    assert set(state.remembered) == {"a"}  # the purged id left after the dedup window
    apply_events(state, [Event(ACK, 7, 600, "z")], 1000, 100)
    apply_events(state, [Event(SEND, 8, 5000, "y", {})], 1000, 100)
    assert state.remembered == {} and set(state.queue) == {"y"}  # acked ids left the state
    assert apply_events(state, [Event(SEND, 9, 5001, "a", {})], 1000, 100)[0].upsert


def test_keys() -> None:
    assert split_queue_key(queue_key("peer/1", "m:2")) == ("peer/1", "m:2")
    assert is_progress_key(progress_key(3)) and not is_progress_key(queue_key("p", "m"))
