"""A handler's control of its message's next delivery, on the test double (the real Peer over
in-memory ports, naks waiting on the bus's clock): ``ctx.nak(delay)`` delivers it again in the
running peer after the delay, ``backoff`` gives the delays of naks without one, ``ctx.term``
dead-letters it at once; each is a DeliveryFailed in txlog, so the queues' counts and dead
letters stay exact, and both survive a restart mid-wait."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import pytest

from tidemark.peer_client import MessageContext, Nak, Term, message
from tidemark.peer_client.exceptions import HandlerError
from tidemark.peer_client.testing import TestBus


@message("tests.ackctl.Job")
@dataclass
class Job:
    n: int


def _script(bus: TestBus, outcomes: list[float | str | None], **kw: object
            ) -> list[tuple[int, int]]:
    """Peer B's handler: for its i-th call, ``outcomes[i]`` a float naks with that delay,
    ``"backoff"`` naks without one, ``"term"`` terminates, None returns. Returns the
    ``(bus clock, delivery_count)`` of each call."""
    calls: list[tuple[int, int]] = []
    b = bus.peer("B")

    @b.handler(**kw)  # type: ignore[arg-type]
    def on(msg: Job, ctx: MessageContext) -> None:
        calls.append((bus.now_ms(), ctx.delivery_count))
        what = outcomes[min(len(calls) - 1, len(outcomes) - 1)]
        if what == "term":
            ctx.term("cannot be handled")
        if what == "backoff":
            ctx.nak()
        if isinstance(what, float):
            ctx.nak(what)
    return calls


def test_two_naks_with_their_delays_then_success_is_handled_three_times() -> None:
    bus = TestBus()
    calls = _script(bus, [0.2, 0.5, None])
    bus.peer("A").send("B", Job(1))
    assert len(calls) == 1
    bus.advance(0.199)
    assert len(calls) == 1                      # not before its delay
    bus.advance(0.001)
    assert len(calls) == 2
    bus.advance(0.5)
    t = [c[0] for c in calls]
    assert [b - a for a, b in pairwise(t)] == [200, 500]
    assert [c[1] for c in calls] == [0, 1, 2]   # ctx.delivery_count counts the naks
    assert not bus.dead_letters("B") and not bus.unacked("B")
    assert [f["reason"].split(":")[0] for f in bus.failures("B")] == ["nak", "nak"]
    assert not any(f["terminal"] for f in bus.failures("B"))
    assert bus["B"].stats["naks"] == 2 and bus["B"].stats["handled"] == 1


def test_a_nak_without_a_delay_takes_the_handlers_backoff_whose_last_step_repeats() -> None:
    bus = TestBus()
    calls = _script(bus, ["backoff", "backoff", "backoff", None], backoff=[0.2, 0.5])
    bus.peer("A").send("B", Job(1))
    for _ in range(12):
        bus.advance(0.1)
    t = [c[0] for c in calls]
    assert [b - a for a, b in pairwise(t)] == [200, 500, 500]
    assert not bus.dead_letters("B") and not bus.unacked("B")


def test_term_dead_letters_at_once_and_is_not_run_again() -> None:
    bus = TestBus()
    calls = _script(bus, ["term"])
    bus.peer("A").send("B", Job(1))
    bus.advance(60)
    assert len(calls) == 1
    (letter,) = bus.dead_letters("B")
    assert letter["delivery_count"] == 1 and letter["reason"] == "terminated: cannot be handled"
    assert [f["terminal"] for f in bus.failures("B")] == [True]
    assert bus["B"].stats["terminated"] == 1
    bus.restart("B")
    assert len(calls) == 1                      # dead-lettered: not replayed either


def test_naks_stop_at_the_delivery_limit_where_the_queues_dead_letter() -> None:
    bus = TestBus(delivery_limit=3)
    calls = _script(bus, [0.1])
    bus.peer("A").send("B", Job(1))
    for _ in range(10):
        bus.advance(0.1)
    assert len(calls) == 3                      # limit 3: the 3rd failure dead-letters it
    assert [d["delivery_count"] for d in bus.dead_letters("B")] == [3]


@pytest.mark.parametrize("outcome", ["nak", "term"])
def test_a_restart_mid_wait_replays_the_message_once(outcome: str) -> None:
    """The peer restarts while a nak waits (or after a term): the new incarnation replays
    the nak'ed message once, with its count; the old wait never fires."""
    bus = TestBus()
    calls = _script(bus, [5.0 if outcome == "nak" else "term", None])
    bus.peer("A").send("B", Job(1))
    bus.restart("B")
    bus.advance(10)
    if outcome == "nak":
        assert [c[1] for c in calls] == [0, 1] and not bus.unacked("B")
        assert not bus.dead_letters("B")
    else:
        assert len(calls) == 1 and len(bus.dead_letters("B")) == 1


def test_nak_and_term_work_from_batch_handlers_and_as_raised_exceptions() -> None:
    bus = TestBus()
    b = bus.peer("B")
    seen: list[list[int]] = []

    @b.batch_handler
    def on(msgs: list[Job]) -> None:
        seen.append([m.n for m in msgs])
        if len(seen) == 1:
            raise Nak(0.3)
    bus.peer("A").send("B", Job(7))
    bus.advance(0.3)
    assert seen == [[7], [7]] and not bus.unacked("B")
    with pytest.raises(ValueError, match="negative"):
        Nak(-1)
    assert str(Term("why")) == "why"


def test_a_backoff_that_is_not_seconds_is_refused_at_registration() -> None:
    b = TestBus().peer("B")
    with pytest.raises(HandlerError, match="backoff must be seconds"):
        @b.handler(backoff=[0.1, -2])
        def on(msg: Job) -> None: ...
