"""Replay on real replica node processes, real Kafka and LevelDB.

Sends go to txlog with :class:`~tidemark.log.producer.LogProducer`; the queues are written by the
test in exactly the format of ``spark_streaming/sink.py`` (key ``peer\\0message_id``,
QueueEntry upserts, tombstones, then a QueueProgress per partition), so the test does not
need the Spark job and knows the expected queue. Layout 2x1: p0r0 owns txlog 0 and 2, p1r0
owns 1 and 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replicas import current_epoch, replica_stack, status, txlog_ust
from tests.support import generate_load, wait_for
from tidemark.gossip.exceptions import PeerForbiddenError, QueuesBehindError, ReplayRefusedError
from tidemark.gossip.pki import Identity
from tidemark.gossip.replay import DEFAULT_BATCH, DEFAULT_WINDOW
from tidemark.gossip.service import ReplicaClient
from tidemark.gossip.tls import resolve_transport
from tidemark.log.offsets import end_offsets
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.producer import LogProducer
from tidemark.log.queue_state import progress_key, queue_key
from tidemark.log.settings import Settings
from tidemark.log.wire import entry_record, is_row
from tidemark.stack.launcher import LocalStack
from tidemark.stack.processes import Child
from tidemark.stack.queues_job import JobProcess
from tidemark.stack.replicas import peer_env

pytestmark = pytest.mark.integration
ENV = "default"


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with replica_stack(bootstrap, tmp_path_factory.mktemp("replay") / "stack", "2x1") as s:
        yield s


def owner(stack: LocalStack, peer: str) -> tuple[str, str]:
    """``(node, address)`` of the replica owning ``peer``'s partition."""
    epoch = current_epoch(stack.settings())
    node = epoch.owners()[f"txlog/{partition_for_peer(peer, 4)}"][0]
    return node, epoch.nodes[node]


class Queues:
    """Writes Sends to txlog and the matching queue records, as the Spark sink does."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer = LogProducer(settings)
        self.codec = self.producer.codec

    def sends(self, peer: str, n: int) -> list[tuple[str, int]]:
        """``n`` Sends to ``peer``; returns ``(message id, txlog offset)``."""
        k = partition_for_peer(peer, 4)
        start = end_offsets(self.settings, "txlog", [k])[k]
        ids = [f"{peer}-{start + i}" for i in range(n)]
        for mid in ids:
            self.producer.produce("txlog", peer, "Send", {
                "message_id": mid, "sender": "al", "recipient": peer, "environment": ENV,
                "message_type": "t", "payload": mid.encode(),
                "timestamp_ms": int(time.time() * 1000), "delivery_count": 0}, partition=k)
        self.producer.flush()
        assert end_offsets(self.settings, "txlog", [k])[k] == start + n  # nobody else wrote
        return [(mid, start + i) for i, mid in enumerate(ids)]

    def upsert(self, peer: str, mid: str, offset: int) -> None:
        k = partition_for_peer(peer, 4)
        self.producer.produce_raw(self.producer.topic("queues"), queue_key(peer, mid).encode(),
                                  self.codec.encode("QueueEntry", {
                                      "peer": peer, "message_id": mid, "sender": "al",
                                      "message_type": "t", "payload": mid.encode(),
                                      "timestamp_ms": 1, "txlog_partition": k,
                                      "txlog_offset": offset, "delivery_count": 0}),
                                  partition=k)

    def queued(self, peer: str, n: int) -> int:
        """``n`` Sends to ``peer``, each in its queue, and the progress past them; returns
        the txlog partition."""
        for mid, offset in self.sends(peer, n):
            self.upsert(peer, mid, offset)
        k = partition_for_peer(peer, 4)
        self.progress(k)
        return k

    def tombstone(self, peer: str, mid: str) -> None:
        self.producer.produce_raw(self.producer.topic("queues"), queue_key(peer, mid).encode(),
                                  None, partition=partition_for_peer(peer, 4))

    def progress(self, k: int, next_offset: int | None = None) -> None:
        """A QueueProgress for txlog ``k`` (default: txlog's current end), after the rows."""
        self.producer.flush()
        if next_offset is None:
            next_offset = end_offsets(self.settings, "txlog", [k])[k]
        self.producer.produce("queues", progress_key(k), "QueueProgress", {
            "txlog_partition": k, "next_offset": next_offset, "batch_id": 1,
            "timestamp_ms": int(time.time() * 1000)}, partition=k)
        self.producer.flush()


def drain(stream) -> list[int]:
    out = []
    for e in stream.entries():
        out.append(e.offset)
        stream.ack()
    return out


def pins_of(stack: LocalStack, node: str) -> list[dict]:
    return (status(stack, node) or {}).get("pins", [])


def test_replay_is_the_queue_in_txlog_order_paced_by_acks(stack: LocalStack) -> None:
    q = Queues(stack.settings())
    peer, other = "ann", next(p for p in (f"x{i}" for i in range(100))
                              if partition_for_peer(p, 4) == partition_for_peer("ann", 4))
    k = partition_for_peer(peer, 4)
    sent = q.sends(peer, 1500)
    for mid, off in sent[::-1]:  # written newest first: the index, not the topic, orders
        q.upsert(peer, mid, off)
    for mid, _ in sent[::7]:
        q.tombstone(peer, mid)
    (omid, ooff), = q.sends(other, 1)
    q.upsert(other, omid, ooff)
    q.progress(k)
    want = [off for i, (_, off) in enumerate(sent) if i % 7]
    mid_at = {off: mid for mid, off in sent}

    client = ReplicaClient()
    stream = client.replay_any(current_epoch(stack.settings()), peer, ENV, batch=300, window=40)
    assert stream.node == owner(stack, peer)[0] and stream.barrier == sent[-1][1] + 2
    got = []
    for e in stream.entries():
        assert is_row(e.value)  # ingest stored the entry's replay row
        rec = entry_record(e.value)
        assert (rec["txlog_offset"], rec["message_id"]) == (e.offset, mid_at[e.offset])
        got.append(e.offset)
        assert stream.received - stream.acked <= 300 + 40
        stream.ack()
    assert got == want  # exactly the queue, in txlog order
    assert stream.complete is not None
    assert stream.complete["text"] == f"replay complete up to barrier {stream.barrier}"
    assert stream.max_unacked_at_batch_start <= 40 and stream.max_unacked <= 340
    assert stream.batches == -(-len(want) // 300)
    stream.close()
    assert pins_of(stack, stream.node) == []
    client.close()


def test_barrier_waits_for_the_queues_then_times_out_clearly(stack: LocalStack) -> None:
    q = Queues(stack.settings())
    peer = "bea"
    k = partition_for_peer(peer, 4)
    sent = q.sends(peer, 3)
    q.upsert(peer, sent[0][0], sent[0][1])
    q.progress(k, sent[0][1])  # the queues job is behind
    node, address = owner(stack, peer)
    client = ReplicaClient()
    stream = client.replay(address, peer, ENV, barrier_timeout_ms=60_000)
    wait_for(lambda: any(p.get("replay", {}).get("state") == "waiting for queues"
                         for p in pins_of(stack, node)), 30, what="replay waiting for queues")
    q.progress(k)  # ... and catches up: the waiting replay goes on
    assert drain(stream) == [sent[0][1]]
    stream.close()

    more = q.sends(peer, 5)
    stream = client.replay(address, peer, ENV, barrier_timeout_ms=1500)
    with pytest.raises(QueuesBehindError) as err:
        list(stream.entries())
    text = str(err.value)
    behind = stream.barrier - (sent[-1][1] + 1)
    assert behind == len(more)
    assert f"barrier {stream.barrier}: {behind} offsets behind" in text, text
    assert " s behind (oldest txlog record not in the queues" in text, text
    assert "last progress written" in text and f"on {node}" in text, text
    stream.close()
    assert pins_of(stack, node) == []
    client.close()


def test_other_environment_and_other_partition_are_refused(stack: LocalStack) -> None:
    """Over mutual TLS the caller is its certificate: a peer of another environment, or
    another peer of this one, is refused before the replay starts; an operator may ask, but
    not for another environment's queue, and a node that does not own the partition says so."""
    node, address = owner(stack, "cy")
    for identity, why in ((Identity("peer", "cy", "prod"), "not a peer of this node's"),
                          (Identity("peer", "dee", ENV), "may not act on the queue of 'cy'")):
        peer = ReplicaClient(transport=resolve_transport(identity))
        with pytest.raises(PeerForbiddenError, match=why):
            peer.replay(address, "cy", identity.environment)
        peer.close()
    client = ReplicaClient()  # an operator
    with pytest.raises(ReplayRefusedError, match="environment 'prod' is not this cluster's"):
        client.replay(address, "cy", "prod")
    other = next(n for n in current_epoch(stack.settings()).nodes if n != node)
    with pytest.raises(ReplayRefusedError, match=f"{other} does not own txlog/"):
        client.replay(current_epoch(stack.settings()).nodes[other], "cy", ENV)
    assert pins_of(stack, node) == [] and pins_of(stack, other) == []
    client.close()


CLIENT = """
import json, sys
from tidemark.gossip.service import ReplicaClient
stream = ReplicaClient().replay(sys.argv[1], sys.argv[2], "default", lease_ms=int(sys.argv[3]),
                                barrier_timeout_ms=60000)
print(json.dumps(stream.header), flush=True)
sys.stdin.read()
"""


def gc_held(stack: LocalStack, node: str, tp: str, barrier: int) -> dict | None:
    doc = status(stack, node)
    if doc and txlog_ust(doc).get(tp, 0) > barrier and doc["gc_point"].get(tp) == barrier:
        return doc
    return None


def test_pin_holds_gc_at_barrier_and_expires_when_the_peer_is_killed(stack: LocalStack,
                                                                      tmp_path: Path) -> None:
    q = Queues(stack.settings())
    peer = "dee"
    k = q.queued(peer, 50)
    tp = f"txlog/{k}"
    node, address = owner(stack, peer)
    proc = Child([sys.executable, "-c", CLIENT, address, peer, "3000"], tmp_path / "client.err",
                 env={**os.environ, **peer_env(stack, peer, ENV)}, talk=True)
    try:
        header = json.loads(proc.readline())
        barrier, pin = header["barrier"], header["pin"]
        generate_load(stack.settings(), peers=20, messages=400, ack_ratio=1.0, seed=5)
        doc = wait_for(lambda: gc_held(stack, node, tp, barrier), 60,
                       what="GC point held at the barrier while the cut moves past it")
        row = next(p for p in doc["pins"] if p["pin"] == pin)
        assert row["barrier"] == {tp: barrier} and row["owner"] == peer
        assert row["lease_ms"] == 3000 and row["expires_ms"] > 0
        first_expiry = row["expires_ms"]
        wait_for(lambda: any(p["pin"] == pin and p["expires_ms"] > first_expiry + 1500
                             for p in pins_of(stack, node)), 30,
                 what="the live peer renewing its lease")
        assert gc_held(stack, node, tp, barrier)  # still held after more than half a lease
    finally:
        proc.kill()  # SIGKILL: the peer disappears without a word
    killed = time.monotonic()
    wait_for(lambda: all(p["pin"] != pin for p in pins_of(stack, node)), 30, 0.1,
             what="the dead peer's pin expiring")
    assert time.monotonic() - killed < 3.0 + 2.0  # its lease, plus a tick and a status call
    end = end_offsets(stack.settings(), "txlog", [k])[k]
    wait_for(lambda: (status(stack, node) or {}).get("gc_point", {}).get(tp) == end, 60,
             what="GC point free to pass the old barrier")


@pytest.mark.spark
@pytest.mark.timeout(420)
def test_replay_of_the_queues_the_spark_job_built(stack: LocalStack, tmp_path: Path) -> None:
    """The real job writes the queues; each replayed peer gets exactly its unacked
    messages, in send order (the barrier wait absorbs the job's start-up)."""
    settings = stack.settings()
    load = generate_load(settings, peers=6, messages=3000, ack_ratio=0.5, seed=9,
                         keep_unacked=True)
    job = JobProcess(settings, tmp_path / "checkpoint", tmp_path / "job.log").start()
    client = ReplicaClient()
    try:
        epoch = current_epoch(stack.settings())
        for peer in sorted(load.unacked):
            stream = client.replay_any(epoch, peer, ENV, barrier_timeout_ms=300_000)
            ids, offsets = [], []
            for e in stream.entries():
                ids.append(entry_record(e.value)["message_id"])
                offsets.append(e.offset)
                stream.ack()
            stream.close()
            assert ids == load.unacked[peer], peer
            assert offsets == sorted(set(offsets))
    finally:
        client.close()
        job.stop()


def test_pin_survives_a_replica_restart(stack: LocalStack) -> None:
    q = Queues(stack.settings())
    peer = "eve"
    k = q.queued(peer, 20)
    tp = f"txlog/{k}"
    node, address = owner(stack, peer)
    client = ReplicaClient()
    stream = client.replay(address, peer, ENV, lease_ms=120_000)
    assert len(drain(stream)) == 20
    pin, barrier = stream.pin, stream.barrier

    LocalStack(stack.state_dir).kill(node)  # SIGKILL mid-replay (before the handover)
    up = subprocess.run([sys.executable, "-m", "tidemark", "local", "up", "--replicas", "2x1",
                         "--state-dir", str(stack.state_dir)], capture_output=True, text=True,
                        timeout=120)
    assert up.returncode == 0, up.stderr
    rows = wait_for(lambda: pins_of(stack, node), 60, what="restarted node answering")
    assert [(p["pin"], p["barrier"]) for p in rows] == [(pin, {tp: barrier})]
    generate_load(stack.settings(), peers=20, messages=300, ack_ratio=1.0, seed=6)
    wait_for(lambda: gc_held(stack, node, tp, barrier), 60,
             what="GC point still held at the barrier after the restart")
    stream.close()  # releases the pin
    assert pins_of(stack, node) == []
    client.close()


@pytest.mark.load  # a bench's own run: with the other benches in make load, not make test
def test_bench_replay_prints_its_figures_beside_the_raw_baseline(stack: LocalStack) -> None:
    """``tidemark bench replay`` as a user runs it (a small backlog, no settle wait): every
    message reached the Peer's handler and the raw consumer, both rates and their ratio."""
    env = {**os.environ, "TIDEMARK_STATE_DIR": str(stack.state_dir)}
    run = [sys.executable, "-m", "tidemark", "bench", "replay", "--messages", "3000",
           "--settle", "0"]
    proc = subprocess.run([*run, "--json"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["peer_handled"] == r["replayed"] == r["raw_entries"] == 3000
    assert r["peer_msgs_per_s"] > 0 and r["raw_msgs_per_s"] > 0
    assert r["ratio"] == pytest.approx(r["peer_msgs_per_s"] / r["raw_msgs_per_s"], abs=0.001)
    assert r["batch"] == DEFAULT_BATCH and r["window"] == DEFAULT_WINDOW
    assert r["rss"]["sampled"] and r["rss"]["node"] in r["node"]
    cpu = r["cpu"]["core_s"]  # where the CPU went: every part read, the peer did work
    assert set(cpu) == {"peer", "serving_replica", "other_replicas", "brokers", "machine",
                        "rest"}
    assert cpu["peer"] > 0 and cpu["serving_replica"] is not None
    assert cpu["brokers"] is None  # this stack's replicas use the session's brokers
    assert cpu["machine"] >= cpu["peer"]
    assert "replay: " in proc.stderr  # progress during the replay
    text = subprocess.run([*run, "--batch", "500", "--window", "100"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    assert "raw confluent-kafka consumer" in text.stdout and "ratio" in text.stdout
    assert "CPU during the replay" in text.stdout and "serving replica" in text.stdout
    assert "batch 500, window 100" in text.stderr
