"""The persisted dedup under a real SIGKILL, on real Kafka, replica nodes (2x2), the Spark
queues job and peer processes: B is killed right after handlers returned, *without* waiting
for its acks (they are held back on purpose), and its next incarnation hands none of those
messages to a handler again, and loses none.

Ground truth: the handler's own record (one line per handled message, fsync'ed before the
handler returns) against the ids A's sends returned; the Acks in txlog show the kill landed
before any of B1's acks reached Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import HandlerLog, PeerScript, acked_by, post, restart_recipient, wait_for
from tidemark.peer_client.peer import Peer
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.fault, pytest.mark.spark, pytest.mark.timeout(900)]


def test_sigkill_after_handlers_returned_without_their_acks(
        replicas_job: tuple[LocalStack, JobProcess], tmp_path: Path,
        recipient: Callable[..., PeerScript]) -> None:
    """A sends 1000 while B is down. B1 (persisted dedup on; acks held back: linger 10 min,
    batch 100k) replays; handlers 0..599 return, the handler of 600 blocks (inbox limit 50:
    mid-replay too); A sends 200 more (held back by B1). B1 is SIGKILLed at once: none of its
    acks is in txlog, so its whole queue is replayed to B2. A sends 200 while B is down and
    200 to B2 live. Every id is handled exactly once; B2 handles exactly 600..1599 in order
    and acks the 600 completed ones without calling the handler."""
    s, job = replicas_job
    settings, record = s.settings(), HandlerLog(tmp_path / "handled.log")
    dedup = str(tmp_path / "dedup")
    with Peer("A", None, settings) as a:
        sent = post(a, "DB", range(1000))                       # DB never ran: all logged
        b1 = recipient(s, "DB", record, block=600, inbox_limit=50, ack_linger_ms=600_000,
                       ack_batch=100_000, dedup_dir=dedup)
        wait_for(record.blocked, 480, 0.1,
                 "B1 blocked in the handler of message 600, mid-replay")
        sent += post(a, "DB", range(1000, 1200))                # to B1, held back by it
        b1.sigkill()                                            # no wait for acks
        finished = record.done_ids()
        assert [n for k, _, _, n in record.rows() if k == "done"] == list(range(600))
        assert not acked_by(settings, "DB") & set(finished), \
            "B1's acks reached txlog: the kill did not land in the window under test"
        inc2, st = restart_recipient(                           # down, then B2 live
            a, "DB", record, sent, lambda: recipient(s, "DB", record, dedup_dir=dedup),
            range(1200, 1400), range(1400, 1600))
        wait_for(lambda: acked_by(settings, "DB") >= set(sent), 60, 0.2,
                 "B2 acked every message, the 600 it skipped included")
    record.exactly_once(sent)
    rows = record.rows()
    b2_ns = [n for k, inc, _, n in rows if k == "done" and inc == inc2]
    assert b2_ns == list(range(600, 1600)), "B2: lost, duplicated or out of order"
    stats = st["stats"]
    assert stats["completed_before"] == 600, stats
    assert stats["dedup_store_ids"] >= 1600 - 1, stats
    assert st["phase"] == "normal" and st["replayed"] + st["forwarded"] >= 1000, st
    assert job.alive, job.log_tail()
