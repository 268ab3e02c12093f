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

import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import PeerScript, handled, wait_for
from tidemark.gossip.cluster_config import ConfigLog
from tidemark.log.consumer import read_to_end
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.settings import Settings
from tidemark.peer_client import message
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.records import peer_codec
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess
from tidemark.stack.replicas import plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from test_replica_support import replicas_and_job, status  # noqa: E402

pytestmark = [pytest.mark.fault, pytest.mark.spark, pytest.mark.timeout(900)]

# A recipient peer in its own process. argv: state dir, peer id, record file, the n whose
# handler blocks until "release" on stdin (-1: none), inbox limit, replay batch, window.
# stdin: "release", "status" (prints the peer's status as one JSON line), "stop".
PEER_SCRIPT = textwrap.dedent("""
    import json, os, sys, threading
    from dataclasses import dataclass
    from tidemark.log.settings import load_settings
    from tidemark.peer_client import MessageContext, Peer, PeerOptions, message
    from tidemark.peer_client.replay import ReplicaReplayer

    @message("rfault.Job")
    @dataclass
    class Job:
        n: int

    state, peer_id, path = sys.argv[1], sys.argv[2], sys.argv[3]
    block, limit, batch, window = (int(a) for a in sys.argv[4:8])
    settings = load_settings(state_dir=state)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lock, go = threading.Lock(), threading.Event()

    def record(line):
        with lock:
            os.write(fd, line.encode())
            os.fsync(fd)

    peer = Peer(peer_id, None, settings, PeerOptions(inbox_limit=limit),
                replayer=ReplicaReplayer(settings, batch=batch, window=window,
                                             covered=False))

    def on_job(msg: Job, ctx: MessageContext) -> None:
        if msg.n == block:
            record(f"blocked {peer.incarnation} {ctx.message_id} {msg.n}\\n")
            go.wait()
        record(f"done {peer.incarnation} {ctx.message_id} {msg.n}\\n")

    peer.handler(Job)(on_job)

    def commands():
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "release":
                go.set()
            elif cmd == "status":
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


@message("rfault.Job")
@dataclass
class Job:
    n: int


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[LocalStack, JobProcess]]:
    folder = tmp_path_factory.mktemp("replay-faults")
    with replicas_and_job(bootstrap, folder) as (s, job):
        yield s, job


class PeerProcess(PeerScript):
    """One run of the recipient peer script."""

    def __init__(self, stack: LocalStack, peer_id: str, record: Path, tmp: Path, *,
                 block: int = -1, limit: int = 10_000, batch: int = 2000,
                 window: int = 200) -> None:
        self.record = record
        super().__init__(stack, peer_id, PEER_SCRIPT,
                         [str(record), str(block), str(limit), str(batch), str(window)], tmp)



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


def exactly_once(record: Path, sent: list[str]) -> None:
    counts = Counter(done_ids(record))
    lost = [m for m in sent if counts[m] == 0]
    twice = [m for m, c in counts.items() if c > 1]
    assert not lost and not twice and set(counts) == set(sent), (
        f"{len(sent)} sent, {len(counts)} handled: lost {lost[:5]} ({len(lost)}),"
        f" twice {twice[:5]} ({len(twice)}), unknown {len(set(counts) - set(sent))}")


def test_recipient_sigkilled_mid_handler(stack: tuple[LocalStack, JobProcess],
                                         tmp_path: Path) -> None:
    """B1 replays a backlog and blocks in the handler of message 700 (inbox limit 50, so the
    replay is mid-stream too) while A keeps sending; SIGKILL once every message B1 finished
    is acked in txlog; A sends while B is down and after B2 is up: every message once."""
    s, job = stack
    settings, record = s.settings(), tmp_path / "handled.log"
    b1 = b2 = None
    with Peer("A", None, settings) as a:
        sent = post(a, "B", range(1500))                     # B never ran: all logged
        try:
            b1 = PeerProcess(s, "B", record, tmp_path, block=700, limit=50)
            wait_for(lambda: any(k == "blocked" for k, *_ in handled(record)), 480, 0.1,
                     "B1 blocked in a handler mid-replay")
            sent += post(a, "B", range(1500, 1700))          # to B1, held back by it
            finished = done_ids(record)
            assert [n for k, _, _, n in handled(record) if k == "done"] == list(range(700))
            wait_for(lambda: acked_by(settings, "B") >= set(finished), 60, 0.2,
                     "B1's acks of the handled messages in txlog")
            b1.sigkill()                                     # mid-handler, mid-replay
            sent += post(a, "B", range(1700, 1900))          # B is down (or A thinks B1 up)
            b2 = PeerProcess(s, "B", record, tmp_path)
            inc2 = b2.ready()
            sent += post(a, "B", range(1900, 2100))          # to B2, live
            wait_for(lambda: set(done_ids(record)) >= set(sent), 480, 0.2,
                     "every message handled after B's restart")
            st = b2.status()
            b2.stop()
        finally:
            for p in (b1, b2):
                if p is not None:
                    p.close()
    exactly_once(record, sent)
    rows = handled(record)
    blocked = [r for r in rows if r[0] == "blocked"]
    assert len(blocked) == 1 and blocked[0][3] == 700
    assert [r[3] for r in rows if r[0] == "done" and r[2] == blocked[0][2]] == [700]
    b2_ns = [n for k, inc, _, n in rows if k == "done" and inc == inc2]
    assert b2_ns == list(range(700, 2100)), "B2: lost, duplicated or out of order"
    assert st["phase"] == "normal" and st["replayed"] >= 1000, st
    assert job.alive, job.log_tail()


def test_replica_serving_the_replay_sigkilled_mid_stream(stack: tuple[LocalStack, JobProcess],
                                                         tmp_path: Path) -> None:
    """R replays a 5000-message queue in batches of 500; its handler blocks at message 1000
    (inbox limit 50), so the stream is in progress; the node serving it is SIGKILLed, the
    handler released: R goes on on the other replica and every message is handled once."""
    s, job = stack
    settings, record = s.settings(), tmp_path / "handled.log"
    tp = f"txlog/{partition_for_peer('R', settings.partitions)}"
    config = ConfigLog(settings)
    try:
        epoch = config.read_to_end()
    finally:
        config.close()
    assert epoch is not None
    owners = epoch.owners()[tp]
    assert len(owners) == 2, owners
    r = None
    killed = ""
    try:
        with Peer("A", None, settings) as a:
            sent = post(a, "R", range(5000))
            r = PeerProcess(s, "R", record, tmp_path, block=1000, limit=50, batch=500,
                            window=100)
            wait_for(lambda: any(k == "blocked" for k, *_ in handled(record)), 480, 0.1,
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
            wait_for(lambda: set(done_ids(record)) >= set(sent), 480, 0.2,
                     "every message handled after the replica's death")
            st = r.status()
            r.stop()
    finally:
        if r is not None:
            r.close()
        if killed:
            s.up(extra=[lambda st_: plan(st_, "2x2")], timeout_s=90)
    exactly_once(record, sent)
    ns = [n for k, i, _, n in handled(record) if k == "done" and i == inc]
    assert ns == list(range(5300)), "lost, duplicated or out of order"
    rep = st["replay"]
    assert rep["retries"] >= 1 and rep["nodes"][0] == killed, rep
    assert rep["nodes"][-1] != killed and rep["nodes"][-1] in owners, rep
    assert st["replayed"] == 5000 and st["phase"] == "normal", st
    assert job.alive, job.log_tail()
