"""The queue index against a dict model: upserts, tombstones and rebuilds in random order,
several per write batch, on a real LevelDB store. After every batch, each peer's queue read
through the index (:func:`tidemark.replica.queue_index.read_queue`, in pages) is exactly the model's
entries of that peer in txlog order, and the index holds no entry the model lacks."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.gossip.replay import entry_rows
from tidemark.log.wire import default_codec
from tidemark.replica.queue_index import (
    delete_entry,
    index_value,
    put_entry,
    read_queue,
    read_queue_framed,
)
from tidemark.replica.store import Store, queue_index_prefix

CODEC = default_codec()
PEERS = ("ann", "bob", "cy")
PART = 3
KEYS = 12  # message ids m0..m11; key i at version v has txlog offset i + 100 * v (unique)


def entry(peer: str, mid: int, offset: int) -> bytes:
    return CODEC.encode("QueueEntry", {
        "peer": peer, "message_id": f"m{mid}", "sender": "s", "message_type": "t",
        "payload": b"x" * (mid % 5), "timestamp_ms": offset, "txlog_partition": PART,
        "txlog_offset": offset, "delivery_count": 0})


def qkey(peer: str, mid: int) -> bytes:
    return f"{peer}\0m{mid}".encode()


op = st.one_of(
    st.tuples(st.just("upsert"), st.sampled_from(PEERS), st.integers(0, KEYS - 1),
              st.integers(0, 5)),
    st.tuples(st.just("tombstone"), st.sampled_from(PEERS), st.integers(0, KEYS - 1),
              st.just(0)),
    st.tuples(st.just("rebuild"), st.just(""), st.just(0), st.just(0)),
)


def check(store: Store, model: dict[bytes, tuple[str, int, bytes]], page: int) -> None:
    for peer in PEERS:
        want = sorted((off, value) for p, off, value in model.values() if p == peer)
        got: list[tuple[int, bytes]] = []
        after = -1
        while True:
            rows, last = read_queue(store, PART, peer, after, 1 << 40, page)
            if last is None:
                break
            got.extend(rows)
            after = last
        assert got == want, peer
        # the replay's framed read: the same entries, in messages of at most the cap (one
        # larger entry alone), each listing its offsets
        cap = 300
        chunks, _ = read_queue_framed(store, PART, peer, -1, 1 << 40, 1 << 30, cap)
        assert [row for offs, body in chunks for row in entry_rows(body, 0)] == want
        for offsets, body in chunks:
            rows = entry_rows(body, 0)
            assert offsets == [off for off, _ in rows]
            assert len(body) <= cap or len(rows) == 1
    index = list(store.db.iterator(prefix=queue_index_prefix(PART)))
    assert len(index) == len(model)
    assert dict(store.queue_entries(PART)) == {k: v for k, (_, _, v) in model.items()}
    assert sorted(index_value(v)[0] for _, v in index) == sorted(model)
    assert {index_value(v)[0]: index_value(v)[1] for _, v in index} == {
        k: v for k, (_, _, v) in model.items()}  # each index entry carries its entry


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(op, min_size=1, max_size=8), min_size=1, max_size=12),
       page=st.integers(1, 5))
def test_index_matches_dict_model(batches: list[list[tuple[str, str, int, int]]],
                                  page: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = Store(folder, "n1")
        model: dict[bytes, tuple[str, int, bytes]] = {}
        try:
            for ops in batches:
                batch = store.batch()
                pending: dict[bytes, tuple[str, int, bytes] | None] = {}
                for kind, peer, mid, version in ops:
                    if kind == "rebuild":
                        batch.commit()
                        store.reset_queues(PART)
                        model.clear()
                        pending.clear()
                        batch = store.batch()
                        continue
                    key = qkey(peer, mid)
                    if kind == "upsert":
                        offset = mid + 100 * version
                        value = entry(peer, mid, offset)
                        put_entry(batch, PART, key, value, peer, offset)
                        pending[key] = (peer, offset, value)
                    else:
                        delete_entry(batch, PART, key)
                        pending[key] = None
                batch.commit()
                for key, row in pending.items():
                    if row is None:
                        model.pop(key, None)
                    else:
                        model[key] = row
                check(store, model, page)
        finally:
            store.close()


def test_rebuild_forgets_only_its_partition(tmp_path) -> None:
    store = Store(tmp_path / "s", "n1")
    batch = store.batch()
    for part in (PART, PART + 1):
        put_entry(batch, part, qkey("bob", 1), entry("bob", 1, 7), "bob", 7)
    batch.commit()
    store.reset_queues(PART)
    assert read_queue(store, PART, "bob", -1, 100, 10) == ([], None)
    rows, last = read_queue(store, PART + 1, "bob", -1, 100, 10)
    assert [off for off, _ in rows] == [7] and last == 7
    # the end offset is exclusive: the barrier itself is not replayed
    assert read_queue(store, PART + 1, "bob", -1, 7, 10) == ([], None)
    store.close()


def test_an_index_written_before_entries_were_inlined_still_reads(tmp_path) -> None:
    """A store whose index values are the queue key alone (written before the index kept
    the entry) is read through the queue key, mixed with inlined values."""
    from tidemark.replica.store import queue_index_key, queue_prefix
    store = Store(tmp_path / "s", "n1")
    batch = store.batch()
    put_entry(batch, PART, qkey("bob", 2), entry("bob", 2, 9), "bob", 9)
    batch.commit()
    old = entry("bob", 1, 7)  # as the earlier layout wrote it: the entry, and its key
    store.db.put(queue_prefix(PART) + qkey("bob", 1), old)
    store.db.put(queue_index_key(PART, "bob", 7), qkey("bob", 1))
    assert index_value(qkey("bob", 1)) == (qkey("bob", 1), None)
    rows, last = read_queue(store, PART, "bob", -1, 100, 10)
    assert rows == [(7, old), (9, entry("bob", 2, 9))] and last == 9
    store.close()
