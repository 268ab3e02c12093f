"""The LevelDB store on disk (real plyvel): atomic batches, reopen, digests, and the
release policy below the GC point."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from log.codec import default_codec
from replica.config import ReleasePolicy
from replica.exceptions import StoreError
from replica.ingest import index_txlog
from replica.release_policy import release
from replica.store import Store

C = default_codec()
NOW = int(time.time() * 1000)


def send(mid: str, peer: str = "bob", ts: int = NOW - 10_000) -> bytes:
    return C.encode("Send", {"message_id": mid, "sender": "al", "recipient": peer,
                             "environment": "default", "message_type": "t", "payload": b"p",
                             "timestamp_ms": ts, "delivery_count": 0})


def ack(mid: str, peer: str = "bob", ts: int = NOW - 10_000) -> bytes:
    return C.encode("Ack", {"message_id": mid, "peer": peer, "environment": "default",
                            "timestamp_ms": ts})


def purge(peer: str, ts: int = NOW - 10_000) -> bytes:
    return C.encode("Purge", {"peer": peer, "environment": "default", "timestamp_ms": ts})


def apply(store: Store, records: list[bytes], start: int = 0) -> None:
    batch = store.batch()
    for i, value in enumerate(records):
        assert index_txlog(batch, 0, start + i, value) is None
    batch.advance("txlog", 0, start, start + len(records))
    batch.commit()


def test_batch_is_atomic_and_survives_reopen(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("a"), send("b")])
    batch = store.batch()
    index_txlog(batch, 0, 2, send("c"))
    batch.advance("txlog", 0, 2, 3)  # never committed: as if killed before the write
    assert store.map("txlog", 0).base_end == 2
    store.close()
    store = Store(tmp_path / "s", "n1")
    assert store.position("txlog", 0) == 2 and store.map("txlog", 0).base_end == 2
    assert [o for o, _ in store.records(0)] == [0, 1]
    assert index_txlog(store.batch(), 0, 9, b"junk") is not None
    store.close()
    with pytest.raises(StoreError, match="belongs to node 'n1'"):
        Store(tmp_path / "s", "n2")


def test_digest_equality(tmp_path: Path) -> None:
    a, b = Store(tmp_path / "a", "a"), Store(tmp_path / "b", "b")
    apply(a, [send("x"), ack("x")])
    apply(b, [send("x"), ack("x")])
    assert a.digest(0, 0, 2) == b.digest(0, 0, 2) != (0, 0)
    apply(b, [send("y")], start=2)
    assert a.digest(0, 0, 3) != b.digest(0, 0, 3)


def test_release_policy_rules(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("acked"), send("unacked"), send("young", ts=NOW), ack("acked"),
                  ack("young", ts=NOW), send("purged", "eve"), purge("eve"), send("late")])
    policy = ReleasePolicy(min_age_ms=5_000)
    # GC point 3: the ack of "acked" (offset 3) is not below it yet, nothing is acked
    assert release(store, 0, 3, policy, NOW) == 0
    assert store.map("txlog", 0).floor == 3
    released = release(store, 0, 7, policy, NOW)
    left = {o for o, _ in store.records(0)}
    # acked + its ack, purged send + the purge; unacked, young ones and "late" stay
    assert {0, 3, 5, 6}.isdisjoint(left) and {1, 2, 4, 7} <= left and released == 4
    assert store.map("txlog", 0).floor == 7
    # the size rule: keep at least this many bytes per partition
    store2 = Store(tmp_path / "t", "n2")
    apply(store2, [send("a"), ack("a")])
    assert release(store2, 0, 2, ReleasePolicy(retain_bytes=1 << 30), NOW) == 0
    assert release(store2, 0, 2, ReleasePolicy(), NOW) == 2
