"""The persisted dedup under a real SIGKILL, on real Kafka, replica nodes (2x2), the Spark
queues job and peer processes: B is killed right after handlers returned, *without* waiting
for its acks (they are held back on purpose), and its next incarnation hands none of those
messages to a handler again, and loses none.

Ground truth: the handler's own record (one line per handled message, fsync'ed before the
handler returns) against the ids A's sends returned; the Acks in txlog show the kill landed
before any of B1's acks reached Kafka.
"""

from __future__ import annotations

import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import PeerScript, handled, wait_for
from tidemark.log.consumer import read_to_end
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.settings import Settings
from tidemark.peer_client import message
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.records import peer_codec
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from test_replica_support import replicas_and_job  # noqa: E402

pytestmark = [pytest.mark.fault, pytest.mark.spark, pytest.mark.timeout(900)]

# The recipient in its own process. argv: state dir, peer id, record file, the n whose
# handler blocks (before it records anything; -1: none), inbox limit, ack linger ms, ack
# batch, dedup dir. stdin: "status" (one JSON line), "stop". stdout: "ready INCARNATION".
PEER_SCRIPT = textwrap.dedent("""
    import json, os, sys, threading
    from dataclasses import dataclass
    from tidemark.log.settings import load_settings
    from tidemark.peer_client import MessageContext, Peer, PeerOptions, message
    from tidemark.peer_client.replay import ReplicaReplayer

    @message("dfault.Job")
    @dataclass
    class Job:
        n: int

    state, peer_id, path = sys.argv[1], sys.argv[2], sys.argv[3]
    block, limit, linger, batch = (int(a) for a in sys.argv[4:8])
    settings = load_settings(state_dir=state)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lock = threading.Lock()

    def record(line):
        with lock:
            os.write(fd, line.encode())
            os.fsync(fd)

    opts = PeerOptions(inbox_limit=limit, ack_linger_ms=linger, ack_batch=batch,
                       dedup_dir=sys.argv[8])
    peer = Peer(peer_id, None, settings, opts, replayer=ReplicaReplayer(settings))

    def on_job(msg: Job, ctx: MessageContext) -> None:
        if msg.n == block:
            record(f"blocked {peer.incarnation} {ctx.message_id} {msg.n}\\n")
            threading.Event().wait()  # until the SIGKILL
        record(f"done {peer.incarnation} {ctx.message_id} {msg.n}\\n")

    peer.handler(Job)(on_job)

    def commands():
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "status":
                print(json.dumps(peer.status()), flush=True)
            elif cmd == "stop":
                break
        peer.stop()
        print("stopped", flush=True)
        os._exit(0)

    threading.Thread(target=commands, daemon=True).start()
    peer.start()
    print("ready", peer.incarnation, flush=True)
    threading.Event().wait()
""")


@message("dfault.Job")
@dataclass
class Job:
    n: int


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[LocalStack, JobProcess]]:
    folder = tmp_path_factory.mktemp("dedup-faults")
    with replicas_and_job(bootstrap, folder) as (s, job):
        yield s, job


class PeerProcess(PeerScript):
    """One run of the recipient script."""

    def __init__(self, stack: LocalStack, peer_id: str, record: Path, tmp: Path,
                 dedup_dir: Path, *, block: int = -1, limit: int = 10_000,
                 linger_ms: int = 20, ack_batch: int = 500) -> None:
        super().__init__(stack, peer_id, PEER_SCRIPT,
                         [str(record), str(block), str(limit), str(linger_ms), str(ack_batch),
                          str(dedup_dir)], tmp)



def done_ids(record: Path) -> list[str]:
    return [mid for kind, _, mid, _ in handled(record) if kind == "done"]


def acked_by(settings: Settings, peer_id: str) -> set[str]:
    """Message ids of the Acks ``peer_id`` appended to txlog."""
    codec, out = peer_codec(), set()
    k = partition_for_peer(peer_id, settings.partitions)
    for batch in read_to_end(settings, "txlog", [k]):
        for m in batch:
            if m.key() != peer_id.encode():
                continue
            dec = codec.decode(m.value())
            if dec.name in ("Ack", "AckBatch") and dec.record["peer"] == peer_id:
                out.update(dec.record.get("message_ids") or [dec.record.get("message_id")])
    return out


def post(a: Peer, to: str, ns: range) -> list[str]:
    ids = [a.post(to, Job(n)) for n in ns]
    assert a.flush(120)
    return ids


def test_sigkill_after_handlers_returned_without_their_acks(
        stack: tuple[LocalStack, JobProcess], tmp_path: Path) -> None:
    """A sends 1000 while B is down. B1 (persisted dedup on; acks held back: linger 10 min,
    batch 100k) replays; handlers 0..599 return, the handler of 600 blocks (inbox limit 50:
    mid-replay too); A sends 200 more (held back by B1). B1 is SIGKILLed at once: none of its
    acks is in txlog, so its whole queue is replayed to B2. A sends 200 while B is down and
    200 to B2 live. Every id is handled exactly once; B2 handles exactly 600..1599 in order
    and acks the 600 completed ones without calling the handler."""
    s, job = stack
    settings, record, dedup = s.settings(), tmp_path / "handled.log", tmp_path / "dedup"
    b1 = b2 = None
    with Peer("A", None, settings) as a:
        sent = post(a, "DB", range(1000))                       # DB never ran: all logged
        try:
            b1 = PeerProcess(s, "DB", record, tmp_path, dedup, block=600, limit=50,
                             linger_ms=600_000, ack_batch=100_000)
            wait_for(lambda: any(k == "blocked" for k, *_ in handled(record)), 480, 0.1,
                     "B1 blocked in the handler of message 600, mid-replay")
            sent += post(a, "DB", range(1000, 1200))            # to B1, held back by it
            b1.sigkill()                                        # no wait for acks
            finished = done_ids(record)
            assert [n for k, _, _, n in handled(record) if k == "done"] == list(range(600))
            assert not acked_by(settings, "DB") & set(finished), \
                "B1's acks reached txlog: the kill did not land in the window under test"
            sent += post(a, "DB", range(1200, 1400))            # B is down
            b2 = PeerProcess(s, "DB", record, tmp_path, dedup)
            inc2 = b2.ready()
            sent += post(a, "DB", range(1400, 1600))            # to B2, live
            wait_for(lambda: set(done_ids(record)) >= set(sent), 480, 0.2,
                     "every message handled after B's restart")
            st = b2.status()
            b2.stop()
            wait_for(lambda: acked_by(settings, "DB") >= set(sent), 60, 0.2,
                     "B2 acked every message, the 600 it skipped included")
        finally:
            for p in (b1, b2):
                if p is not None:
                    p.close()
    counts = Counter(done_ids(record))
    lost = [m for m in sent if not counts[m]]
    twice = [m for m, c in counts.items() if c > 1]
    assert not lost and not twice and set(counts) == set(sent), (
        f"{len(sent)} sent: lost {lost[:5]} ({len(lost)}), twice {twice[:5]} ({len(twice)})")
    rows = handled(record)
    b2_ns = [n for k, inc, _, n in rows if k == "done" and inc == inc2]
    assert b2_ns == list(range(600, 1600)), "B2: lost, duplicated or out of order"
    stats = st["stats"]
    assert stats["completed_before"] == 600, stats
    assert stats["dedup_store_ids"] >= 1600 - 1, stats
    assert st["phase"] == "normal" and st["replayed"] + st["forwarded"] >= 1000, st
    assert job.alive, job.log_tail()
