"""The GC state's stored form and the sweep's pacing (:mod:`tidemark.replica.gc_state`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemark.replica.gc_state import (
    REST,
    GcState,
    decode_state,
    encode_state,
    finish_sweep,
    start_sweep,
    sweep_due,
)

offsets = st.integers(-1, 1 << 40)
times = st.integers(0, 1 << 45)
states = st.builds(GcState, offsets, offsets, times, offsets, offsets, offsets, offsets,
                   offsets, st.booleans(), times, times, st.booleans())


@given(states)
def test_the_state_round_trips(state: GcState) -> None:
    assert decode_state(encode_state(state)) == state


@given(st.integers(0, 1 << 40), st.integers(-1, 1 << 40), times)
def test_a_state_from_before_sweeps_asks_for_one(cursor: int, blocked: int, at: int) -> None:
    import struct
    state = decode_state(struct.pack(">qqq", cursor, blocked, at))
    assert (state.cursor, state.blocked_at, state.blocked_ms) == (cursor, blocked, at)
    assert state.dirty and state.legacy and not state.sweeping and state.low == 0


@given(st.lists(st.tuples(st.integers(0, 20_000), st.booleans(), st.integers(0, 5),
                          st.integers(0, 3)), max_size=60),
       st.integers(0, 10_000))
def test_sweeps_run_only_when_useful_and_rest_after_long_ones(
        steps: list[tuple[int, bool, int, int]], interval: int) -> None:
    """A model: time advances, the cursor moves (marking the state dirty when it met an Ack),
    a running sweep finishes after some passes. A sweep starts only when one is due by the
    model's rules, and whenever it is."""
    s, now, last_start, last_took, passes_left = GcState(), 0, 0, 0, 0
    dirty = False
    for advance, met_ack, moved, passes in steps:
        now += advance
        s.cursor += moved
        if met_ack and moved:
            s.dirty = dirty = True
        want = (passes_left == 0 and dirty and s.cursor > s.low
                and now - last_start >= max(interval, (REST + 1) * last_took))
        assert sweep_due(s, now, interval) == want
        if want:
            start_sweep(s, now)
            last_start, dirty, passes_left = now, False, passes + 1
            assert s.sweeping and s.horizon == s.cursor and not s.dirty
        if passes_left:
            passes_left -= 1
            if not passes_left:
                finish_sweep(s, now)
                last_took = now - last_start
                assert not s.sweeping and s.swept == s.horizon and s.low == s.horizon


@given(st.binary(min_size=1, max_size=40), st.lists(st.binary(max_size=80), max_size=30))
def test_an_ack_batch_expiry_round_trips(peer: bytes, ids: list[bytes]) -> None:
    """One expiry value per AckBatch lists the Ack index suffix of each of its ids."""
    from tidemark.replica.release_policy import batch_expiry, expiry_suffixes
    assert expiry_suffixes(batch_expiry(peer, ids)) == [peer + b"\0" + mid for mid in ids]
