"""The peer's start sequence on the real stack: replay from the replicas, handover, normal.

Kafka (the session cluster), replica nodes (layout 2x2) and the Spark queues job. B is down
while A sends; B starts with a :class:`~tidemark.peer_client.replay.ReplicaReplayer` and its handlers
see every message exactly once, in per-sender order. Then A keeps sending while C stops and
restarts: nothing is lost or handled twice.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from tests import cluster
from tests.support import (
    ack_records,
    converge,
    operator_purge,
    wait_for,
    wait_purge_applied,
)
from tidemark.log.partitioner import partition_for_peer
from tidemark.peer_client import BatchContext, BatchFailed, MessageContext, message
from tidemark.peer_client.context import Phase
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.replay import ReplicaReplayer
from tidemark.peer_client.wiring import KafkaWiring
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]
N = 2000
#: How long the stale sender's view stays frozen: past a 30 s timed safety phase (the design
#: has no such timer; with one, messages of this window would be lost), and under ``make soak``
#: three times that.
STALE_S = (35.0, 95.0)


@message("rtest.Tick")
@dataclass
class Tick:
    n: int


class Seen:
    """What the handlers of one peer id saw, across its incarnations."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, int, bool]] = []

    def handler(self, msg: Tick, ctx: MessageContext) -> None:
        with self.lock:
            self.items.append((ctx.sender, msg.n, ctx.replay))

    def count(self) -> int:
        with self.lock:
            return len(self.items)

    def ns(self) -> list[int]:
        with self.lock:
            return [n for _, n, _ in self.items]


def _peer(stack: LocalStack, peer_id: str, seen: Seen) -> Peer:
    settings = stack.settings()
    peer = Peer(peer_id, None, settings, replayer=ReplicaReplayer(settings))
    peer.handler(Tick)(seen.handler)
    return peer


def _backlog(stack: LocalStack, sender: str, to: str) -> None:
    """``sender`` posts Ticks 0 to N - 1 to ``to`` (down) and waits until they are logged."""
    with Peer(sender, None, stack.settings()) as a:
        for i in range(N):
            a.post(to, Tick(i))
        assert a.flush(60)


def test_down_peer_replays_every_message_once_in_order(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    s, job = replicas_job
    _backlog(s, "A", "B")
    seen = Seen()
    b = _peer(s, "B", seen)
    with b:
        assert b.phase is Phase.NORMAL
        wait_for(lambda: seen.count() >= N, 120, 0.05, "B handling the backlog")
        assert seen.ns() == list(range(N)), "lost, duplicated or out of order"
        assert all(replay for _, _, replay in seen.items)
        st = b.status()
        # what the queues covered is replayed, the rest comes through the handover
        assert st["phase"] == "normal" and st["replayed"] + st["forwarded"] == N, st
        assert st["replay"]["handover_target"] >= N and st["replay"]["stage"] == "normal"
        # a plain handler, no dedup store, no tail: every replayed chunk went the lean way
        assert st["stats"].get("replayed_lean", 0) == st["replay"]["replay_received"], st
    assert seen.count() == N and job.alive, job.log_tail()
    # the replayed messages were acked by range: each record names B's partition and a
    # range holding the Send of every id it lists, and together they list each message once
    batches, sends = ack_records(s.settings(), "B")
    k = partition_for_peer("B", s.settings().partitions)
    ranged = [b for b in batches if b["txlog_partition"] >= 0]
    assert ranged and len(ranged) < N // 10, [len(b["message_ids"]) for b in batches]
    for b in ranged:
        assert b["txlog_partition"] == k
        offsets = [sends[m] for m in b["message_ids"]]
        assert (b["first_offset"], b["last_offset"]) == (min(offsets), max(offsets))
    listed = [m for b in batches for m in b["message_ids"]]
    assert sorted(listed) == sorted(sends) and len(set(listed)) == N


def test_a_batch_handler_gets_the_backlog_in_lists_each_message_once(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    """B is down while A sends; B comes back with a batch handler that fails one message
    (``BatchFailed``): every other message reaches it once, in order, in lists of many; the
    failed one is delivered again to the next incarnation, and nothing else is."""
    s, job = replicas_job
    settings = s.settings()
    _backlog(s, "A3", "BB")
    calls: list[list[int]] = []

    def on_ticks(ticks: list[Tick], ctx: BatchContext) -> None:
        calls.append([t.n for t in ticks])
        assert ctx.replay and len(ctx) == len(ticks)
        if 7 in calls[-1]:
            raise BatchFailed({calls[-1].index(7): "seven is refused"})

    def handled() -> list[int]:
        return [n for call in list(calls) for n in call]

    for incarnation in range(2):
        b = Peer("BB", None, settings, replayer=ReplicaReplayer(settings))
        b.batch_handler(Tick)(on_ticks)
        with b:
            want = N if incarnation == 0 else N + 1
            wait_for(lambda w=want: len(handled()) >= w, 120, 0.05, "BB handling its backlog")
            st = b.status()
            assert st["replayed"] + st["forwarded"] == want - (N if incarnation else 0), st
    ns = handled()
    assert ns[:N] == list(range(N)) and ns[N:] == [7], "lost, twice or out of order"
    assert max(len(c) for c in calls) > 1 and calls[-1] == [7]
    assert job.alive, job.log_tail()


@pytest.mark.load  # about 60 s: in `make load`, so that make test stays under 25 minutes
def test_sender_keeps_sending_through_a_restart(replicas_job: tuple[LocalStack, JobProcess]) -> None:
    s, job = replicas_job
    settings = s.settings()
    seen = Seen()
    stop = threading.Event()
    sent: list[int] = []
    errors: list[BaseException] = []

    def sender(a: Peer) -> None:
        try:
            i = 0
            while not stop.is_set():
                a.send("C", Tick(i))
                sent.append(i)
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    with Peer("A2", None, settings) as a:
        c1 = _peer(s, "C", seen)
        c1.start()
        a.wait_for_peer("C")
        t = threading.Thread(target=sender, args=(a,), daemon=True)
        t.start()
        wait_for(lambda: seen.count() >= 300, 60, 0.05, "C handling live traffic")
        c1.stop()
        mark = len(sent)
        wait_for(lambda: len(sent) >= mark + 500, 60, 0.05, "A sending while C is down")
        c2 = _peer(s, "C", seen)
        with c2:  # A keeps sending while C2 registers, replays and hands over
            at_normal = len(sent)
            wait_for(lambda: len(sent) >= at_normal + 500, 60, 0.05, "A sending after")
            stop.set()
            t.join(60)
            assert not errors, errors
            assert a.flush(60)
            total = len(sent)
            wait_for(lambda: seen.count() >= total, 120, 0.05, "C handling everything")
            st = c2.status()
        ns = seen.ns()
        assert sorted(ns) == list(range(total)), (
            f"lost {sorted(set(range(total)) - set(ns))[:10]},"
            f" twice {[n for n in set(ns) if ns.count(n) > 1][:10]}")
        assert st["replayed"] + st["forwarded"] > 0 and st["phase"] == "normal", st
        assert ns == sorted(ns), "per-sender order broken"
    assert job.alive, job.log_tail()


# about 55 s: in `make load` (make test stays under 25 minutes); three times that in soak
@pytest.mark.parametrize("stale_s", [pytest.param(STALE_S[0], marks=pytest.mark.load),
                                     pytest.param(STALE_S[1], marks=pytest.mark.soak)])
def test_stale_sender_is_delivered_from_the_log(replicas_job: tuple[LocalStack, JobProcess],
                                                stale_s: float) -> None:
    """A's directory view is frozen on D's old incarnation for the whole restart of D and
    long after its handover, longer than the 30 s safety period of a timed handover
    (:data:`STALE_S`; three times it under ``make soak``): whatever A sends reaches D's
    handlers exactly once (no timer ends the redelivery path)."""
    s, job = replicas_job
    settings = s.settings()
    seen = Seen()
    with Peer("A3", None, settings) as a:
        d1 = _peer(s, "D", seen)
        d1.start()
        a.wait_for_peer("D")
        old = a._core.peer("D").incarnation
        wiring = a._wiring
        assert isinstance(wiring, KafkaWiring) and wiring.follower is not None
        wiring.follower.close()                   # A's view is frozen from here on
        frozen_at = time.monotonic()
        for i in range(100):
            a.send("D", Tick(i))                  # directly to D1
        wait_for(lambda: seen.count() >= 100, 60, 0.05, "D1 handling")
        d1.stop()
        for i in range(100, 400):                 # D is down: A still holds D1
            a.send("D", Tick(i))
        d2 = _peer(s, "D", seen)
        with d2:
            assert d2.phase is Phase.NORMAL and d2.incarnation != old
            # D2 is up, A never learns of it: A keeps sending, spread over the rest of the
            # stale window (pacing: a rate, not a synchronization)
            start, span = time.monotonic(), max(0.0, frozen_at + stale_s - time.monotonic())
            for j, i in enumerate(range(400, 1400)):
                time.sleep(max(0.0, start + span * j / 999 - time.monotonic()))
                a.send("D", Tick(i))
            assert time.monotonic() - frozen_at >= stale_s
            assert a._core.directory.get("D").incarnation == old  # still stale
            wait_for(lambda: seen.count() >= 1400, 120, 0.05, "D2 handling the stale sends")
            st = d2.status()
            assert st["forwarded"] >= 1000, st
        ns = seen.ns()
        assert sorted(ns) == list(range(1400)) and ns == list(range(1400)), (
            f"lost {sorted(set(range(1400)) - set(ns))[:10]}, count {len(ns)}")
    assert job.alive, job.log_tail()


def test_the_readme_peer_example_runs_as_written_with_replay(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    """The peer example of docs/peer_client.md and the README (the same text, checked by
    tests/unit/test_peer_docs.py) runs as written on a stack like ``make demo``'s: replica
    nodes, the queues job, replay on, the cluster's environment; then again, so that its
    second run starts ``shipping`` with a replay (nothing missed: an empty one)."""
    import os
    import subprocess
    import sys

    from tests.support import ROOT
    from tests.unit.test_peer_docs import example
    s, _ = replicas_job
    settings = s.settings()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    env["TIDEMARK_TLS_ISSUER"] = os.environ["TIDEMARK_TLS_ISSUER"]  # the stack's CA here
    env.update(TIDEMARK_STATE_DIR=str(s.state_dir), TIDEMARK_BOOTSTRAP=settings.bootstrap,
               TIDEMARK_TOPIC_PREFIX=settings.topic_prefix,
               TIDEMARK_PARTITIONS=str(settings.partitions), **cluster.client_env())
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", example("peer")], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "shipping got o-1 from shop (live: True)" in proc.stdout, proc.stdout
        assert "shipping got o-2 from shop" in proc.stdout and "sent " in proc.stdout


def test_a_purge_the_queues_have_not_applied_is_left_out_of_the_replay(
        replicas_job: tuple[LocalStack, JobProcess]) -> None:
    """The operator purges D while the queues job is stopped (the replicas' queues still
    hold D's 50 messages): D's replay reads its Purge from ``purges`` and delivers only the
    10 messages sent after it, once each. (Last in the module: it stops and restarts the
    module's job.)"""
    s, job = replicas_job
    settings = s.settings()
    with Peer("A2", None, settings) as a:
        for i in range(50):
            a.post("D", Tick(i))
        assert a.flush(60)
        converge(job)  # the queues hold D's 50
        job.stop()
        try:
            below = operator_purge(settings, "D")
            assert below >= 50
            for i in range(50, 60):
                a.post("D", Tick(i))
            assert a.flush(60)
            seen = Seen()
            with _peer(s, "D", seen) as d:
                assert d.phase is Phase.NORMAL  # the replay and the handover are over
                wait_for(lambda: seen.count() >= 10, 120, 0.05, "D handling what came after")
                assert seen.ns() == list(range(50, 60)), "a purged message was replayed"
        finally:
            job.start()
    converge(job)
    wait_purge_applied(settings, "D", below)  # the job applies the Purge it had not read
    assert seen.count() == 10 and job.alive, job.log_tail()
