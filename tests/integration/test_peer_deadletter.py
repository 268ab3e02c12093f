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

import json
import threading
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

    def applied() -> None:
        try:
            job.wait_for_progress(240.0)
        except QueuesError as exc:
            pytest.fail(str(exc))

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
