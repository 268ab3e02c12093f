"""Replay under faults, on real Kafka, real replica node processes (layout 2x2: two replicas
per partition), the real Spark queues job and real peer processes.

- SIGKILL of the recipient while one of its handlers runs (mid-replay): after its restart
  every message A sent reaches a handler, none twice.
- SIGKILL of the replica node serving the recipient's replay, mid-stream: the peer resumes
  on the other replica of the partition and dedups; every message once.

Ground truth: the handlers' own record (one line per handled message, fsync'ed by the peer
process before the handler returns) against the message ids A's sends returned.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.replicas import current_epoch, status
from tests.support import HandlerLog, PeerScript, acked_by, post, restart_recipient, wait_for
from tidemark.log.partitioner import partition_for_peer
from tidemark.peer_client.peer import Peer
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess
from tidemark.stack.replicas import plan

pytestmark = [pytest.mark.fault, pytest.mark.spark, pytest.mark.timeout(900)]

#: The recipient's replay: batches of 2000, a window of 200, a replay without the covered
#: shortcut (every entry comes from the replica).
REPLAY = {"batch": 2000, "window": 200, "covered": False}


def test_recipient_sigkilled_mid_handler(replicas_job: tuple[LocalStack, JobProcess],
                                         tmp_path: Path,
                                         recipient: Callable[..., PeerScript]) -> None:
    """B1 replays a backlog and blocks in the handler of message 700 (inbox limit 50, so the
    replay is mid-stream too) while A keeps sending; SIGKILL once every message B1 finished
    is acked in txlog; A sends while B is down and after B2 is up: every message once."""
    s, job = replicas_job
    settings, record = s.settings(), HandlerLog(tmp_path / "handled.log")
    with Peer("A", None, settings) as a:
        sent = post(a, "B", range(1500))                     # B never ran: all logged
        b1 = recipient(s, "B", record, block=700, replay=REPLAY, inbox_limit=50)
        wait_for(record.blocked, 480, 0.1,
                 "B1 blocked in a handler mid-replay")
        sent += post(a, "B", range(1500, 1700))              # to B1, held back by it
        finished = record.done_ids()
        assert [n for k, _, _, n in record.rows() if k == "done"] == list(range(700))
        wait_for(lambda: acked_by(settings, "B") >= set(finished), 60, 0.2,
                 "B1's acks of the handled messages in txlog")
        b1.sigkill()                                         # mid-handler, mid-replay
        inc2, st = restart_recipient(   # B is down (or A thinks B1 up), then B2 live
            a, "B", record, sent, lambda: recipient(s, "B", record, replay=REPLAY),
            range(1700, 1900), range(1900, 2100))
    record.exactly_once(sent)
    rows = record.rows()
    blocked = [r for r in rows if r[0] == "blocked"]
    assert len(blocked) == 1 and blocked[0][3] == 700
    assert [r[3] for r in rows if r[0] == "done" and r[2] == blocked[0][2]] == [700]
    b2_ns = [n for k, inc, _, n in rows if k == "done" and inc == inc2]
    assert b2_ns == list(range(700, 2100)), "B2: lost, duplicated or out of order"
    assert st["phase"] == "normal" and st["replayed"] >= 1000, st
    assert job.alive, job.log_tail()


def test_replica_serving_the_replay_sigkilled_mid_stream(
        replicas_job: tuple[LocalStack, JobProcess], tmp_path: Path,
        recipient: Callable[..., PeerScript]) -> None:
    """R replays a 5000-message queue in batches of 500; its handler blocks at message 1000
    (inbox limit 50), so the stream is in progress; the node serving it is SIGKILLed, the
    handler released: R goes on on the other replica and every message is handled once."""
    s, job = replicas_job
    settings, record = s.settings(), HandlerLog(tmp_path / "handled.log")
    tp = f"txlog/{partition_for_peer('R', settings.partitions)}"
    owners = current_epoch(settings).owners()[tp]
    assert len(owners) == 2, owners
    killed = ""
    try:
        with Peer("A", None, settings) as a:
            sent = post(a, "R", range(5000))
            r = recipient(s, "R", record, block=1000, inbox_limit=50,
                          replay={**REPLAY, "batch": 500, "window": 100})
            wait_for(record.blocked, 480, 0.1,
                     "R blocked in a handler mid-replay")

            def serving() -> str | None:
                for node in owners:
                    for pin in (status(s, node) or {}).get("pins", []):
                        if pin.get("owner") == "R" and pin.get("replay"):
                            return node
                return None
            killed = str(wait_for(serving, 30, 0.2, "the node serving R's replay"))
            doc = status(s, killed) or {}
            replay = next(p["replay"] for p in doc.get("pins", []) if p.get("owner") == "R")
            assert replay["state"] != "complete" and replay["sent"] < 5000, replay
            s.kill(killed)                                    # mid-stream
            r.command("release")
            inc = r.ready()
            sent += post(a, "R", range(5000, 5300))            # live, after the handover
            wait_for(lambda: set(record.done_ids()) >= set(sent), 480, 0.2,
                     "every message handled after the replica's death")
            st = r.status()
            r.stop()
    finally:
        if killed:
            s.up(extra=[lambda st_: plan(st_, "2x2")], timeout_s=90)
    record.exactly_once(sent)
    ns = [n for k, i, _, n in record.rows() if k == "done" and i == inc]
    assert ns == list(range(5300)), "lost, duplicated or out of order"
    rep = st["replay"]
    assert rep["retries"] >= 1 and rep["nodes"][0] == killed, rep
    assert rep["nodes"][-1] != killed and rep["nodes"][-1] in owners, rep
    assert st["replayed"] == 5000 and st["phase"] == "normal", st
    assert job.alive, job.log_tail()
