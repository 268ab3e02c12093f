"""A real peer whose handler always fails for one message, restarted until it is dead-lettered.

Kafka (the session cluster), replica nodes (2x2) and the Spark queues job with
``TIDEMARK_DELIVERY_LIMIT=3``. A sends ten messages to B while B is down; B's handler raises
for one of them. Each incarnation of B replays its queue, the handler fails, the peer library
appends DeliveryFailed; the handler sees the message exactly ``limit`` times across restarts
(with ``ctx.delivery_count`` 0, 1, 2), never again after that; ``tidemark deadletter list``
shows it, and after ``tidemark deadletter replay`` the next incarnation sees it once more,
with its count reset. The same scenario on the test double (:class:`TestBus`, the queues
job's own model in memory) gives the same deliveries and the same dead letter.
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.support import Job, tidemark_cli, wait_for
from tidemark.peer_client import MessageContext
from tidemark.peer_client.context import Phase
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.replay import ReplicaReplayer
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


def _incarnation(s: LocalStack, job: JobProcess, seen: Handler, poison_deliveries: int,
                 ) -> dict:
    """Start B, wait until it is normal and its handler saw the poison ``poison_deliveries``
    times, stop it, wait until the job applied everything B appended; B's status."""
    settings = s.settings()
    b = Peer("B", None, settings, replayer=ReplicaReplayer(settings))
    b.handler(Job)(seen)
    with b:
        assert b.phase is Phase.NORMAL
        wait_for(lambda: len(seen.of(POISON)) >= poison_deliveries, 120, 0.05,
                 f"B's handler seeing the poison {poison_deliveries} times")
        wait_for(lambda: b.status()["replay"]["stage"] == "normal", 60, 0.05, "B normal")
        st = b.status()
    try:
        job.wait_for_progress(240.0)
    except QueuesError as exc:
        pytest.fail(str(exc))
    return st


def test_always_failing_handler_is_dead_lettered_after_limit(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    s, job = replicas_job
    settings = s.settings()
    with Peer("A", None, settings) as a:
        for i in range(10):
            a.post("B", Job(i))
        assert a.flush(60)
    seen = Handler()
    for k in range(1, LIMIT + 1):
        st = _incarnation(s, job, seen, k)
        assert seen.count() == 10 + (k - 1), "only the poison comes back"
    assert [(c, r) for _, c, r, _ in seen.of(POISON)] == [(0, True), (1, True), (2, True)]
    # the next incarnation has nothing to replay: the message is in deadletter now
    st = _incarnation(s, job, seen, LIMIT)
    assert st["replayed"] == 0, st
    assert len(seen.of(POISON)) == LIMIT and seen.count() == 10 + LIMIT - 1
    listed = json.loads(tidemark_cli(settings, "deadletter", "list", "--json", "--peer", "B"))
    (letter,) = [x for x in listed if x["kind"] == "delivery"]
    assert letter["count"] == LIMIT and letter["sender"] == "A"
    assert "job 5 is poison" in letter["reason"]
    mid = seen.of(POISON)[0][3]
    assert letter["message_id"] == mid
    assert _on_the_test_double(settings.environment) == (
        [(c, r) for _, c, r, _ in seen.of(POISON)], [(letter["count"], letter["reason"])])
    tidemark_cli(settings, "deadletter", "replay", mid)       # while B is down
    _incarnation(s, job, seen, LIMIT + 1)
    last = seen.of(POISON)[-1]
    assert len(seen.of(POISON)) == LIMIT + 1 and last[1] == 0 and last[3] != mid
    assert last[3].startswith(mid + "~replay-")
    assert job.alive, job.log_tail()


def _on_the_test_double(environment: str) -> tuple[list[tuple[int, bool]], list[tuple[int, str]]]:
    """The scenario above on :class:`TestBus`: A posts ten Jobs while B is down, B starts
    ``LIMIT + 1`` times; B's poison deliveries (count, replay) and B's dead letters (count,
    reason)."""
    from tidemark.peer_client.testing import TestBus

    bus = TestBus(environment=environment, delivery_limit=LIMIT)
    a = bus.peer("A")
    for i in range(10):
        a.post("B", Job(i))
    seen = Handler()
    for _ in range(LIMIT + 1):
        b = bus.peer("B", start=False)
        b.handler(Job)(seen)
        b.start()
        b.stop()
    return ([(c, r) for _, c, r, _ in seen.of(POISON)],
            [(x["delivery_count"], x["reason"]) for x in bus.dead_letters("B")])
