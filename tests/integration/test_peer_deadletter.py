"""A real peer whose handler always fails for one message, restarted until it is dead-lettered.

Kafka (the session cluster), replica nodes (2x2) and the Spark queues job with
``TIDEMARK_DELIVERY_LIMIT=3``. A sends ten messages to B while B is down; B's handler raises
for one of them. Each incarnation of B replays its queue, the handler fails, the peer library
appends DeliveryFailed; the handler sees the message exactly ``limit`` times across restarts
(with ``ctx.delivery_count`` 0, 1, 2), never again after that; ``tidemark deadletter list``
shows it, and after ``tidemark deadletter replay`` the next incarnation sees it once more,
with its count reset. The scenario is written once and runs on
``TestBus(with_real=True)`` (the real stack) and on the test double (:class:`TestBus`, the
queues job's own model in memory): the same deliveries and the same dead letter.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable

import pytest

from tests.support import Job, tidemark_cli
from tidemark.peer_client import MessageContext
from tidemark.peer_client.context import Phase
from tidemark.peer_client.testing import TestBus
from tidemark.spark_streaming.exceptions import QueuesError
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]
LIMIT, POISON = 3, 5
JOB_ENV = {"TIDEMARK_DELIVERY_LIMIT": str(LIMIT)}  # for the replicas_job fixture


class Handler:
    """Records every delivery (n, delivery_count, replay); raises for the poison message."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[int, int, bool, str]] = []

    def __call__(self, msg: Job, ctx: MessageContext) -> None:
        with self.lock:
            self.items.append((msg.n, ctx.delivery_count, ctx.replay, ctx.message_id))
        if msg.n == POISON:
            raise ValueError(f"job {msg.n} is poison")

    def of(self, n: int) -> list[tuple[int, int, bool, str]]:
        with self.lock:
            return [x for x in self.items if x[0] == n]

    def count(self) -> int:
        with self.lock:
            return len(self.items)


def _applied(job: JobProcess) -> Callable[[], None]:
    """Wait until the queues job covered everything in txlog (fails the test if it does not
    within 4 minutes)."""
    def applied() -> None:
        try:
            job.wait_for_progress(240.0)
        except QueuesError as exc:
            pytest.fail(str(exc))
    return applied


def _incarnation(bus: TestBus, seen: Handler, poison_deliveries: int,
                 applied: Callable[[], None]) -> dict:
    """Start B, wait until it is normal and its handler saw the poison ``poison_deliveries``
    times, stop it, wait until the queues ``applied`` everything B appended; B's status."""
    b = bus.peer("B", start=False)
    b.handler(Job)(seen)
    with b:
        assert b.phase is Phase.NORMAL
        bus.wait_until(lambda: len(seen.of(POISON)) >= poison_deliveries, 120,
                       f"B's handler seeing the poison {poison_deliveries} times")
        bus.wait_until(lambda: b.status()["replay"]["stage"] == "normal", 60, "B normal")
        st = b.status()
    applied()
    return st


def _scenario(bus: TestBus, applied: Callable[[], None]) -> tuple[Handler, dict]:
    """A posts ten Jobs while B is down, B starts ``LIMIT + 1`` times: the poison comes back
    ``LIMIT`` times, then never; what B's handler saw, and B's last status."""
    with bus.peer("A") as a:
        for i in range(10):
            a.post("B", Job(i))
        assert a.flush(60)
    seen = Handler()
    for k in range(1, LIMIT + 2):
        st = _incarnation(bus, seen, min(k, LIMIT), applied)
        assert seen.count() == 10 + min(k, LIMIT) - 1, "only the poison comes back"
    return seen, st


def test_always_failing_handler_is_dead_lettered_after_limit(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    s, job = replicas_job
    settings = s.settings()
    applied = _applied(job)

    with TestBus(settings.environment, with_real=True, settings=settings) as real:
        seen, st = _scenario(real, applied)
    poison = [(c, r) for _, c, r, _ in seen.of(POISON)]
    assert poison == [(0, True), (1, True), (2, True)]
    # the last incarnation had nothing to replay: the message is in deadletter now
    assert st["replayed"] == 0, st
    listed = json.loads(tidemark_cli(settings, "deadletter", "list", "--json", "--peer", "B"))
    (letter,) = [x for x in listed if x["kind"] == "delivery"]
    assert letter["count"] == LIMIT and letter["sender"] == "A"
    assert "job 5 is poison" in letter["reason"]
    mid = seen.of(POISON)[0][3]
    assert letter["message_id"] == mid
    with TestBus(settings.environment, delivery_limit=LIMIT) as double:
        seen_double, st_double = _scenario(double, lambda: None)
        letters = [(x["delivery_count"], x["reason"]) for x in double.dead_letters("B")]
    assert [(c, r) for _, c, r, _ in seen_double.of(POISON)] == poison
    assert st_double["replayed"] == 0 and letters == [(letter["count"], letter["reason"])]
    tidemark_cli(settings, "deadletter", "replay", mid)       # while B is down
    with TestBus(settings.environment, with_real=True, settings=settings) as real:
        _incarnation(real, seen, LIMIT + 1, applied)
    last = seen.of(POISON)[-1]
    assert len(seen.of(POISON)) == LIMIT + 1 and last[1] == 0 and last[3] != mid
    assert last[3].startswith(mid + "~replay-")
    assert job.alive, job.log_tail()


class Controlled:
    """D's handler: Job 1 naks after 0.2 s, then 0.5 s, then returns; Job 2 terminates;
    Job 3 naks for a minute the first time (D restarts meanwhile), then returns. Records
    ``(clock(), delivery_count, replay)`` per delivery, by job."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock, self.lock = clock, threading.Lock()
        self.seen: dict[int, list[tuple[float, int, bool]]] = {1: [], 2: [], 3: []}

    def __call__(self, msg: Job, ctx: MessageContext) -> None:
        with self.lock:
            calls = self.seen[msg.n]
            calls.append((self.clock(), ctx.delivery_count, ctx.replay))
            n = len(calls)
        if msg.n == 1 and n <= 2:
            ctx.nak((0.2, 0.5)[n - 1])
        if msg.n == 2:
            ctx.term("bad")
        if msg.n == 3 and n == 1:
            ctx.nak(60.0)

    def count(self, n: int) -> int:
        with self.lock:
            return len(self.seen[n])


def _ack_control(bus: TestBus, seen: Controlled, applied: Callable[[], None],
                 elapse: Callable[[float], None]) -> None:
    """C sends Jobs 1-3 to a running D (directly); D naks, terminates and naks; D stops
    while Job 3's nak waits, and its next incarnation replays Job 3 once."""
    d = bus.peer("D", start=False)
    d.handler(Job)(seen)
    with d:
        with bus.peer("C") as c:
            for i in (1, 2, 3):
                c.post("D", Job(i))
            assert c.flush(60)
        elapse(0.2)
        elapse(0.5)
        bus.wait_until(lambda: (seen.count(1), seen.count(2), seen.count(3)) == (3, 1, 1), 60,
                       "D's handler: Job 1 three times, Jobs 2 and 3 once")
    applied()
    d = bus.peer("D", start=False)
    d.handler(Job)(seen)
    with d:
        bus.wait_until(lambda: seen.count(3) == 2, 120, "D's next incarnation replaying Job 3")
    applied()


def test_nak_and_term_in_the_running_peer_on_the_real_stack_and_the_double(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    """Job 1's naks redeliver it in the running peer after 0.2 s and 0.5 s (± 100 ms), then
    it is acked; Job 2's term dead-letters it at once (one delivery); Job 3, nak'ed when its
    peer stops, comes back once in the next incarnation's replay with its count. The test
    double (naks on its clock) sees the same deliveries and the same dead letter."""
    s, job = replicas_job
    settings = s.settings()
    applied = _applied(job)

    real = Controlled(time.monotonic)
    with TestBus(settings.environment, with_real=True, settings=settings) as bus:
        _ack_control(bus, real, applied, lambda s: None)
    t1 = [t for t, _, _ in real.seen[1]]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(t1)]
    assert abs(gaps[0] - 0.2) <= 0.1 and abs(gaps[1] - 0.5) <= 0.1, gaps
    shape = {n: [(c, r) for _, c, r in calls] for n, calls in real.seen.items()}
    assert shape == {1: [(0, False), (1, False), (2, False)], 2: [(0, False)],
                     3: [(0, False), (1, True)]}, shape
    listed = json.loads(tidemark_cli(settings, "deadletter", "list", "--json", "--peer", "D"))
    letters = [(x["count"], x["reason"]) for x in listed if x["kind"] == "delivery"]
    assert letters == [(1, "terminated: bad")], listed
    with TestBus(settings.environment, delivery_limit=LIMIT) as double:
        twin = Controlled(lambda: double.now_ms() / 1000)
        _ack_control(double, twin, lambda: None, double.advance)
        assert [(x["delivery_count"], x["reason"]) for x in double.dead_letters("D")] == letters
    assert {n: [(c, r) for _, c, r in calls] for n, calls in twin.seen.items()} == shape
    t1 = [t for t, _, _ in twin.seen[1]]
    assert [round(b - a, 3) for a, b in itertools.pairwise(t1)] == [0.2, 0.5]
