"""The replica node's ingest loop pacing (``replica.node.step_wait`` / ``push_due``), checked
against a model of the consumer: librdkafka waits in whole milliseconds, so a shorter wait
returns at once. The loop must never spin through such empty steps while a push is pending."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tidemark.replica.node import IDLE_WAIT, PUSH_SLACK, push_due, step_wait

_times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
_gaps = st.floats(min_value=0.0, max_value=0.2, allow_nan=False)


def _consume_empty(wait: float) -> float:
    """Seconds an empty ``consume(1, wait)`` takes: librdkafka truncates to milliseconds, then
    a few microseconds of call overhead."""
    return math.floor(wait * 1000) / 1000 + 5e-6


@given(_times, st.one_of(st.none(), _times))
def test_a_step_waits_at_least_a_millisecond_and_at_most_the_idle_wait(now: float,
                                                                        push_at: float | None
                                                                        ) -> None:
    assert PUSH_SLACK <= step_wait(now, push_at) <= IDLE_WAIT


@given(_times, _gaps)
def test_a_wait_shortened_to_the_slack_means_the_push_is_due(now: float, gap: float) -> None:
    push_at = now + gap
    if push_at - now < PUSH_SLACK:
        assert push_due(now, push_at)
    else:
        assert step_wait(now, push_at) <= push_at - now  # never sleeps past the push


@given(_times, _gaps)
def test_no_records_reach_the_pending_push_in_a_bounded_number_of_steps(start: float,
                                                                        gap: float) -> None:
    """With nothing to consume, the loop reaches the push in about ``gap / IDLE_WAIT`` steps
    plus one or two, each a real wait: never hundreds of zero-length ones."""
    now, push_at, steps = start, start + gap, 0
    while not push_due(now, push_at):
        wait = step_wait(now, push_at)
        assert _consume_empty(wait) >= 0.001  # a wait librdkafka actually makes
        now += _consume_empty(wait)
        steps += 1
        assert steps <= gap / IDLE_WAIT + 3
