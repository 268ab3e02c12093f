"""Backfill between two real LevelDB stores over a real loopback gRPC server (no Kafka):
chunks whose digests match are skipped, the others are copied, the gap closes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_replica_store import NOW, C, ack, send

from tidemark.gossip.service import MAX_MESSAGE_BYTES, pack_records, start_server
from tidemark.gossip.service import ReplicaClient as Peers
from tidemark.replica.backfill import Backfiller, serve_digest, serve_fetch
from tidemark.replica.ingest import index_txlog
from tidemark.replica.store import Store
from tidemark.stack.processes import free_ports

pytestmark = pytest.mark.usefixtures("insecure")  # plaintext: TLS is tests/security


def test_backfill_skips_equal_chunks_and_copies_the_rest(tmp_path: Path) -> None:
    records = [send(f"m{i}") if i % 2 == 0 else ack(f"m{i - 1}") for i in range(10)]
    source, target = Store(tmp_path / "src", "a"), Store(tmp_path / "dst", "b")
    batch = source.batch()
    for off, value in enumerate(records):
        index_txlog(batch, 0, off, value)
    batch.advance("txlog", 0, 0, 10)
    batch.commit()
    batch = target.batch()  # the target holds 0..4 already, but its map says it does not
    for off, value in enumerate(records[:5]):
        index_txlog(batch, 0, off, value)
    batch.advance("txlog", 0, 10, 12)
    batch.commit()
    assert target.map("txlog", 0).gaps() == [(0, 10)]

    def digest(body: bytes) -> bytes:
        req = json.loads(body)
        d, n = source.digest(req["partition"], req["start"], req["end"])
        return json.dumps({"digest": str(d), "count": n}).encode()

    def fetch(body: bytes) -> bytes:
        req = json.loads(body)
        return pack_records(source.records(req["partition"], req["start"], req["end"]))

    address = f"127.0.0.1:{free_ports(1)[0]}"
    server = start_server(address, {"Digest": digest, "Fetch": fetch})
    peers = Peers()
    try:
        backfill = Backfiller(target, peers, chunk=5)
        assert backfill.step(0, {"a": source.map("txlog", 0)}, {"a": address}, budget_s=5)
    finally:
        peers.close()
        server.stop(0)
    assert target.map("txlog", 0).gaps() == [] and target.map("txlog", 0).base_end == 12
    assert backfill.skipped == 5 and backfill.copied == 5
    assert list(target.records(0)) == list(source.records(0))
    assert target.ack_offset(0, "bob", "m8") == 9  # indexes are built for copied records


def test_backfill_chunks_stay_below_the_grpc_cap_with_large_records(tmp_path: Path) -> None:
    """3400 records of ~20 KB: one 5000-offset chunk would be ~68 MB, over gRPC's 64 MiB
    message cap; chunks are bounded by bytes, so every call fits and the gap closes."""
    big = C.encode("Send", {"message_id": "m", "sender": "al", "recipient": "bob",
                            "environment": "default", "message_type": "t",
                            "payload": b"x" * 20_000, "timestamp_ms": NOW,
                            "delivery_count": 0})
    n = 3400
    source, target = Store(tmp_path / "src", "a"), Store(tmp_path / "dst", "b")
    batch = source.batch()
    for off in range(n):
        index_txlog(batch, 0, off, big)
    batch.advance("txlog", 0, 0, n)
    batch.commit()
    batch = target.batch()
    batch.advance("txlog", 0, n, n + 1)
    batch.commit()
    replies: list[int] = []

    def digest(body: bytes) -> bytes:
        return serve_digest(source, body)

    def fetch(body: bytes) -> bytes:
        out = serve_fetch(source, body)
        replies.append(len(out))
        return out

    address = f"127.0.0.1:{free_ports(1)[0]}"
    server = start_server(address, {"Digest": digest, "Fetch": fetch})
    peers = Peers()
    try:
        backfill = Backfiller(target, peers)
        assert backfill.step(0, {"a": source.map("txlog", 0)}, {"a": address}, budget_s=60)
    finally:
        peers.close()
        server.stop(0)
    assert target.map("txlog", 0).gaps() == [] and target.map("txlog", 0).base_end == n + 1
    assert backfill.copied == n and len(replies) > 1
    assert max(replies) <= backfill.max_bytes + 20_100 < MAX_MESSAGE_BYTES
    assert sum(1 for _ in target.records(0)) == n
