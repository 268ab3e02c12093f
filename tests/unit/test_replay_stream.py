"""The Replay stream end to end in one process: a real LevelDB store and queue index, the
real gRPC server and client, no Kafka (the barrier comes from a stub high watermark)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support import wait_for
from tidemark.gossip.exceptions import (
    NodeUnreachableError,
    QueuesBehindError,
    ReplayInterruptedError,
    ReplayRefusedError,
)
from tidemark.gossip.service import ReplicaClient, start_server
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.settings import Settings
from tidemark.log.wire import default_codec, encode_row, entry_record, is_row
from tidemark.replica.leases import Leases
from tidemark.replica.queue_index import delete_entry, put_entry
from tidemark.replica.replay import ReplayService
from tidemark.replica.store import Store, progress_key
from tidemark.stack.processes import free_ports

pytestmark = pytest.mark.usefixtures("insecure")  # plaintext: TLS is tests/security

CODEC = default_codec()
SETTINGS = Settings(partitions=4, environment="test")
PEER = "bob"
K = partition_for_peer(PEER, 4)


class Replica:
    """A store, its leases and the replay service behind a gRPC server."""

    def __init__(self, folder: Path, barrier: int) -> None:
        self.store = Store(folder, "n1")
        self.leases = Leases()
        self.leases.open(self.store)
        self.progress = threading.Condition()
        self.stopping = threading.Event()
        self.barrier = barrier
        self.service = ReplayService("n1", SETTINGS, self.store, self.leases,
                                     lambda: [0, 1, 2, 3], dict, self.progress,
                                     self.stopping, high_watermark=lambda k: self.barrier)
        self.address = f"127.0.0.1:{free_ports(1)[0]}"
        self.server = self.serve()

    def serve(self) -> grpc.Server:
        def unpin(body: bytes) -> bytes:
            return json.dumps({"released": self.leases.release(json.loads(body)["pin"])}
                              ).encode()

        def renew(body: bytes) -> bytes:
            return json.dumps({"renewed": self.leases.renew(json.loads(body)["pin"])
                               is not None}).encode()
        return start_server(self.address, {"Unpin": unpin, "RenewPin": renew},
                            streams={"Replay": self.service.handle})

    def put(self, peer: str, mid: str, offset: int) -> None:
        """Queue ``mid``: its index entry carries a replay row (as ingest writes it) for
        even offsets, the QueueEntry bytes (as written before rows) for odd ones."""
        batch = self.store.batch()
        rec = {"peer": peer, "message_id": mid, "sender": "al", "message_type": "t",
               "payload": mid.encode(), "timestamp_ms": 1, "txlog_partition": K,
               "txlog_offset": offset, "delivery_count": 0}
        put_entry(batch, partition_for_peer(peer, 4), f"{peer}\0{mid}".encode(),
                  CODEC.encode("QueueEntry", rec), peer, offset,
                  encode_row(rec) if offset % 2 == 0 else None)
        batch.commit()

    def drop(self, peer: str, mid: str) -> None:
        batch = self.store.batch()
        delete_entry(batch, partition_for_peer(peer, 4), f"{peer}\0{mid}".encode())
        batch.commit()

    def set_progress(self, next_offset: int) -> None:
        self.store.db.put(progress_key(K), CODEC.encode("QueueProgress", {
            "txlog_partition": K, "next_offset": next_offset, "batch_id": 1,
            "timestamp_ms": 1}))
        with self.progress:
            self.progress.notify_all()

    def close(self) -> None:
        self.stopping.set()
        self.server.stop(0)
        self.store.close()


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Replica]:
    r = Replica(tmp_path / "s", barrier=10_000)
    yield r
    r.close()


def test_streams_exactly_the_queue_in_txlog_order_with_flow_control(replica: Replica) -> None:
    offsets = list(range(0, 9_000, 3))  # 3000 entries, written in scrambled key order
    for i, off in sorted(enumerate(offsets), key=lambda t: (t[0] * 7919) % 3000):
        replica.put(PEER, f"m{i}", off)
    replica.drop(PEER, "m5")
    replica.put(PEER, "late", 10_000)          # at the barrier: not replayed
    replica.put("zed" if partition_for_peer("zed", 4) == K else "ann", "other", 4)
    replica.set_progress(10_000)
    client = ReplicaClient()
    stream = client.replay(replica.address, PEER, "test", batch=500, window=50)
    assert stream.barrier == 10_000 and stream.partition == K
    got = []
    for e in stream.entries():
        got.append(e.offset)
        assert is_row(e.value) == (e.offset % 2 == 0)
        assert entry_record(e.value)["txlog_offset"] == e.offset
        assert stream.received - stream.acked <= 500 + 50
        stream.ack()
    assert got == [o for i, o in enumerate(offsets) if i != 5]
    assert stream.complete and stream.complete["barrier"] == 10_000
    assert stream.complete["text"] == "replay complete up to barrier 10000"
    assert stream.max_unacked_at_batch_start <= 50 and stream.max_unacked <= 550
    assert stream.batches == 6
    assert [p["barrier"] for p in replica.leases.status()] == [{f"txlog/{K}": 10_000}]
    stream.close()
    assert len(replica.leases) == 0  # released at close
    client.close()


def test_a_peer_that_does_not_read_rows_gets_queue_entry_bytes(replica: Replica) -> None:
    """A client from before replay rows (``rows`` not asked) is sent every entry as the
    QueueEntry bytes it stands for, rows re-encoded; one that asks gets what is stored."""
    for i in range(40):
        replica.put(PEER, f"m{i}", i)  # even offsets stored as rows
    replica.set_progress(10_000)
    client = ReplicaClient()
    old = client.replay(replica.address, PEER, "test", rows=False)
    entries = list(old.entries())
    old.ack(len(entries))
    old.close()
    assert [e.offset for e in entries] == list(range(40))
    assert not any(is_row(e.value) for e in entries)
    for e in entries:
        rec = CODEC.decode(e.value).record
        assert (rec["peer"], rec["message_id"], rec["txlog_offset"], rec["payload"]) == (
            PEER, f"m{e.offset}", e.offset, f"m{e.offset}".encode())
    new = client.replay(replica.address, PEER, "test")
    stored = list(new.entries())
    new.ack(len(stored))
    new.close()
    assert [is_row(e.value) for e in stored] == [e.offset % 2 == 0 for e in stored]
    assert [entry_record(e.value) for e in stored] == [entry_record(e.value) for e in entries]


def test_server_waits_for_acks_between_batches(replica: Replica) -> None:
    for i in range(30):
        replica.put(PEER, f"m{i}", i)
    replica.set_progress(10_000)
    client = ReplicaClient()
    stream = client.replay(replica.address, PEER, "test", batch=10, window=3)
    it = stream.entries()
    first = [next(it).offset for _ in range(10)]
    assert first == list(range(10))
    session = next(iter(replica.service.sessions.values()))
    wait_for(lambda: session.row()["state"] == "waiting for acks", 10, 0.02,
             what="server waiting for acks")
    stream.ack(6)
    stream.flush()
    wait_for(lambda: session.row()["acked"] == 6, 10, 0.02, what="acks seen")
    row = session.row()
    assert row["sent"] == 10 and row["unacked"] == 4 and row["state"] == "waiting for acks"
    stream.ack(1)  # 3 unacked: the next batch may go
    rest = []
    for e in it:
        rest.append(e.offset)
        stream.ack()
    assert rest == list(range(10, 30))
    stream.close()
    client.close()


def test_barrier_wait_then_timeout_message(replica: Replica) -> None:
    replica.put(PEER, "m0", 5)
    replica.set_progress(9_000)
    client = ReplicaClient()
    stream = client.replay(replica.address, PEER, "test", barrier_timeout_ms=20_000)
    session = next(iter(replica.service.sessions.values()))
    assert session.row()["state"] == "waiting for queues"
    replica.set_progress(10_000)  # the queues job catches up while the replica waits
    assert [e.offset for e in stream.entries()] == [5]
    stream.close()

    replica.set_progress(9_400)
    stream = client.replay(replica.address, PEER, "test", barrier_timeout_ms=300)
    with pytest.raises(QueuesBehindError) as err:
        list(stream.entries())
    text = str(err.value)
    assert "QueueProgress at offset 9400, barrier 10000: 600 offsets behind" in text
    assert "s ago" in text and "waited 0." in text
    assert len(replica.leases) == 0  # the failed replay's pin is released
    stream.close()
    client.close()


def test_refusals(replica: Replica) -> None:
    client = ReplicaClient()
    with pytest.raises(ReplayRefusedError, match="environment 'prod' is not this cluster's "
                                                 "environment 'test'"):
        client.replay(replica.address, PEER, "prod")
    with pytest.raises(ReplayRefusedError, match="bad batch"):
        client.replay(replica.address, PEER, "test", batch=0)
    assert len(replica.leases) == 0
    client.close()


def _hundred_entries(tmp_path: Path) -> tuple[Replica, ReplicaClient, Any]:
    """A replica holding 100 entries of PEER, and a replay of them in batches of 20."""
    replica = Replica(tmp_path / "s", barrier=1_000)
    for i in range(100):
        replica.put(PEER, f"m{i}", i)
    replica.set_progress(1_000)
    client = ReplicaClient()
    return replica, client, client.replay(replica.address, PEER, "test", batch=20, window=0)


def test_interrupted_replay_resumes_after_last_offset(tmp_path: Path) -> None:
    replica, client, stream = _hundred_entries(tmp_path)
    seen = []
    with pytest.raises(ReplayInterruptedError) as err:
        for e in stream.entries():
            seen.append(e.offset)
            stream.ack()
            if len(seen) == 30:
                replica.server.stop(0)
    assert err.value.last_offset == seen[-1] and 30 <= len(seen) < 100
    pin = stream.pin
    stream.close(release=False)
    replica.server = replica.serve()
    again = ReplicaClient()
    resumed = again.replay(replica.address, PEER, "test", after_offset=seen[-1])
    assert [e.offset for e in resumed.entries()] == list(range(seen[-1] + 1, 100))
    assert pin in {p["pin"] for p in replica.leases.status()}  # held until its lease ends
    resumed.close(release=False)
    again.close()
    client.close()
    replica.close()


def test_unknown_method_stays_unary_compatible(replica: Replica) -> None:
    client = ReplicaClient()
    assert client.call_json(replica.address, "Unpin", {"pin": "x"}) == {"released": False}
    with pytest.raises(grpc.RpcError):
        client.call(replica.address, "Nope", b"")
    client.close()


def test_entry_batches_stream_the_same_entries_acked_by_chunk(replica: Replica) -> None:
    for i in range(1_000):
        replica.put(PEER, f"m{i}", 2 * i)
    replica.set_progress(10_000)
    client = ReplicaClient()
    stream = client.replay(replica.address, PEER, "test", batch=300, window=40)
    assert stream.ack_every == 20
    got: list[int] = []
    sizes = []
    for rows in stream.entry_batches():
        sizes.append(len(rows))
        assert stream.last_offset == rows[-1][0] and stream.received == len(got) + len(rows)
        for i in range(0, len(rows), stream.ack_every):
            chunk = rows[i:i + stream.ack_every]
            got.extend(off for off, _ in chunk)
            assert all(entry_record(v)["txlog_offset"] == off for off, v in chunk)
            stream.ack(len(chunk))
    assert got == [2 * i for i in range(1_000)] and sizes == [300, 300, 300, 100]
    assert stream.complete and stream.acked == 1_000
    assert stream.max_unacked_at_batch_start <= 40
    stream.close()
    client.close()


def test_entry_batches_raise_interrupted_with_the_last_offset(tmp_path: Path) -> None:
    replica, client, stream = _hundred_entries(tmp_path)
    seen: list[int] = []
    with pytest.raises(ReplayInterruptedError) as err:
        for rows in stream.entry_batches():
            seen.extend(off for off, _ in rows)
            stream.ack(len(rows))
            if len(seen) >= 30:
                replica.server.stop(0)
    assert err.value.last_offset == seen[-1] == stream.last_offset and 30 <= len(seen) < 100
    stream.close(release=False)
    client.close()
    replica.close()


def test_a_covered_replay_and_a_retry_do_not_wait_for_the_queues(replica: Replica) -> None:
    """``covered``: the barrier is what the queues cover (the header says where txlog
    ended); ``barrier`` (a retry) keeps the barrier asked for, at most the high watermark;
    while a replica waits it tells the peer how far the queues are."""
    replica.put(PEER, "m0", 5)
    replica.put(PEER, "m1", 9_200)
    replica.set_progress(9_000)
    client = ReplicaClient()
    stream = client.replay(replica.address, PEER, "test", covered=True, barrier_timeout_ms=300)
    assert stream.barrier == 9_000 and stream.header["high_watermark"] == 10_000
    assert [e.offset for e in stream.entries()] == [5] and stream.waiting is None
    stream.close()
    stream = client.replay(replica.address, PEER, "test", barrier=9_000, barrier_timeout_ms=300)
    assert stream.barrier == 9_000 and [e.offset for e in stream.entries()] == [5]
    stream.close()
    replica.set_progress(10_000)
    stream = client.replay(replica.address, PEER, "test", barrier=12_000)
    assert stream.barrier == 10_000 and [e.offset for e in stream.entries()] == [5, 9_200]
    stream.close()
    replica.set_progress(9_500)
    stream = client.replay(replica.address, PEER, "test", barrier_timeout_ms=1_500)
    with pytest.raises(QueuesBehindError):
        list(stream.entries())
    assert stream.waiting is not None and not stream.streaming_entries
    assert (stream.waiting["queue_progress"], stream.waiting["barrier"]) == (9_500, 10_000)
    stream.close()
    replica.store.db.delete(progress_key(K))  # the queues job has covered nothing yet
    stream = client.replay(replica.address, PEER, "test", covered=True, barrier_timeout_ms=300)
    assert stream.barrier == 0 and list(stream.entries()) == []
    stream.close()
    with pytest.raises(ReplayRefusedError):
        list(client.replay(replica.address, PEER, "test", barrier=-3).entries())
    client.close()


class SilentReplica:
    """A Replay handler that sends its header (or, ``header=False``, nothing) and then stays
    silent with the call open, as a replica cut off by a partition looks to the peer: no
    reset, no error, no message."""

    def __init__(self, header: bool) -> None:
        self.header, self.release = header, threading.Event()
        self.address = f"127.0.0.1:{free_ports(1)[0]}"
        self.server = start_server(self.address, {}, streams={"Replay": self.handle})

    def handle(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        next(requests)
        if self.header:
            yield b"H" + json.dumps({"pin": "p1", "barrier": 100, "partition": K,
                                     "node": "n1"}).encode()
        self.release.wait(30)

    def close(self) -> None:
        self.release.set()
        self.server.stop(0)


@pytest.mark.parametrize("header", [True, False])
def test_a_replica_that_goes_silent_is_given_up_after_the_stall_timeout(header: bool) -> None:
    silent = SilentReplica(header)
    client = ReplicaClient()
    try:
        if not header:
            with pytest.raises(NodeUnreachableError, match="sent no header"):
                client.replay(silent.address, PEER, "test", stall_timeout_s=0.5)
            return
        stream = client.replay(silent.address, PEER, "test", stall_timeout_s=0.5)
        assert stream.barrier == 100
        with pytest.raises(ReplayInterruptedError, match="sent nothing for 0.5 s") as err:
            list(stream.entries())
        assert err.value.last_offset == -1
        stream.close(release=False)
    finally:
        client.close()
        silent.close()
