"""The LevelDB store on disk (real plyvel): atomic batches, reopen, digests, and the
release policy below the GC point."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from tidemark.log.wire import default_codec
from tidemark.replica.config import ReleasePolicy
from tidemark.replica.exceptions import StoreError
from tidemark.replica.ingest import index_purge, index_txlog
from tidemark.replica.release_policy import release
from tidemark.replica.store import Store

C = default_codec()
NOW = int(time.time() * 1000)


def send(mid: str, peer: str = "bob", ts: int = NOW - 10_000) -> bytes:
    return C.encode("Send", {"message_id": mid, "sender": "al", "recipient": peer,
                             "environment": "default", "message_type": "t", "payload": b"p",
                             "timestamp_ms": ts, "delivery_count": 0})


def ack(mid: str, peer: str = "bob", ts: int = NOW - 10_000) -> bytes:
    return C.encode("Ack", {"message_id": mid, "peer": peer, "environment": "default",
                            "timestamp_ms": ts})


def acks(mids: list[str] | tuple[str, ...], peer: str = "bob", ts: int = NOW - 10_000
         ) -> bytes:
    return C.encode("AckBatch", {"message_ids": list(mids), "peer": peer,
                                 "environment": "default", "timestamp_ms": ts})


def racks(mids: list[str] | tuple[str, ...], span: tuple[int, int, int], peer: str = "bob",
          ts: int = NOW - 10_000) -> bytes:
    """A range ack (what a peer appends for replayed messages): ``span`` is
    ``(txlog partition, first offset, last offset)``."""
    return C.encode("AckBatch", {"message_ids": list(mids), "peer": peer,
                                 "environment": "default", "timestamp_ms": ts,
                                 "txlog_partition": span[0], "first_offset": span[1],
                                 "last_offset": span[2]})


def purge(peer: str) -> tuple[str, str]:
    """A Purge of ``peer`` where :func:`apply` meets it: reaching the Sends logged before
    (the operator's Purges come through ``purges``; no txlog record, the offset stays a gap)."""
    return ("purge", peer)


def apply(store: Store, records: list[bytes | tuple[str, str]], start: int = 0) -> None:
    batch = store.batch()
    for i, value in enumerate(records):
        if isinstance(value, tuple):
            index_purge(batch, 0, value[1], start + i, NOW - 10_000)
        else:
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
    apply(store, [send("acked"), send("unacked"), ack("acked"), send("purged", "eve"),
                  purge("eve"), send("late"), send("young", ts=NOW), ack("young", ts=NOW)])
    policy = ReleasePolicy(min_age_ms=5_000, sweep_interval_ms=0)
    # GC point 2: the ack of "acked" (offset 2) is not below it yet, nothing is acked
    assert release(store, 0, 2, policy, NOW) == 0
    assert store.map("txlog", 0).floor == 2
    released = release(store, 0, 8, policy, NOW)
    left = {o for o, _ in store.records(0)}
    # acked + its ack, the purged send (the Purge, at 4, is no txlog record); "unacked" and
    # "late" stay, and GC waits at the first record younger than min_age ("young", offset 6)
    assert {0, 2, 3}.isdisjoint(left) and left == {1, 5, 6, 7} and released == 3
    assert store.map("txlog", 0).floor == 6
    assert release(store, 0, 8, policy, NOW + 5_000) == 2  # now old enough, and acked
    assert {o for o, _ in store.records(0)} == {1, 5} and store.map("txlog", 0).floor == 8
    # the size rule: keep at least this many bytes per partition
    store2 = Store(tmp_path / "t", "n2")
    apply(store2, [send("a"), ack("a")])
    assert release(store2, 0, 2, ReleasePolicy(retain_bytes=1 << 30), NOW) == 0
    assert release(store2, 0, 2, ReleasePolicy(), NOW) == 2


def _keys(store: Store, prefix: bytes) -> list[bytes]:
    return [k for k, _ in store.db.iterator(prefix=prefix)]


def test_duplicate_sends_are_released_with_their_ack(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    # two copies before the ack, one after it, all below the GC point
    apply(store, [send("m"), send("m"), ack("m"), send("m")])
    assert release(store, 0, 4, ReleasePolicy(), NOW) == 4
    assert list(store.records(0)) == []
    # a copy appended later (a sender's retry) is still matched by the ack's index entry
    apply(store, [send("m")], start=4)
    assert release(store, 0, 5, ReleasePolicy(), NOW) == 1
    assert list(store.records(0)) == []


def test_ack_and_purge_index_entries_do_not_leak(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("a"), send("x", "eve"), ack("a"), purge("eve"), send("y", "eve")])
    policy = ReleasePolicy(ack_window_ms=60_000)
    assert release(store, 0, 4, policy, NOW) == 3  # a, x and the ack (the Purge: no record)
    assert _keys(store, b"U") == []            # the purge was applied: its entry goes
    assert len(_keys(store, b"A")) == 1        # kept for late copies, for ack_window_ms
    assert release(store, 0, 5, policy, NOW + 60_000) == 0  # "y" came after the purge
    assert _keys(store, b"A") == []            # its window passed
    assert [o for o, _ in store.records(0)] == [4]


def test_an_ack_batch_acks_each_of_its_ids_and_its_index_entries_expire(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("a"), send("b"), send("c"), acks(["a", "c", "a"]), ack("b")])
    assert store.ack_offset(0, "bob", "a") == store.ack_offset(0, "bob", "c") == 3
    policy = ReleasePolicy(ack_window_ms=60_000)
    assert release(store, 0, 5, policy, NOW) == 5
    assert list(store.records(0)) == []
    assert len(_keys(store, b"A")) == 3        # kept for late copies, for ack_window_ms
    apply(store, [send("c"), acks(["c"])], start=5)  # a late copy, then a later ack of it
    assert release(store, 0, 7, policy, NOW) == 2
    # the window of "c"'s second ack has passed, but its entry stays until a sweep that
    # started after that ack was visited has finished (a pending copy might still need it)
    assert release(store, 0, 7, policy, NOW + 60_000) == 0
    assert _keys(store, b"A") == [b"A\x00\x00bob\x00c"]
    assert release(store, 0, 7, policy, NOW + 60_000) == 0
    assert _keys(store, b"A") == [] and _keys(store, b"E") == []
    store.close()


def test_an_ack_batch_writes_one_expiry_and_old_per_id_expiries_still_expire(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("a"), send("b"), acks(["a", "b"])])
    policy = ReleasePolicy(ack_window_ms=60_000)
    assert release(store, 0, 3, policy, NOW) == 3  # the Sends and the batch itself
    assert len(_keys(store, b"E")) == 1        # one for the batch, not one per id
    # an expiry a store from before wrote: one per id, ``<4-byte index>`` after the offset
    due = struct.pack(">Q", NOW - 10_000 + 60_000)
    with store.db.write_batch() as wb:
        wb.put(b"A\x00\x00bob\x00old", struct.pack(">Q", 2))
        wb.put(b"E\x00\x00" + due + struct.pack(">QI", 2, 7), b"bob\x00old")
    assert release(store, 0, 3, policy, NOW + 60_000) == 0
    assert release(store, 0, 3, policy, NOW + 60_000) == 0
    assert _keys(store, b"A") == [] and _keys(store, b"E") == []
    store.close()


def test_a_range_ack_is_one_index_key_and_expires_like_a_batch(tmp_path: Path) -> None:
    """A range ack writes one index key, not one per id; it releases the Sends of its ids in
    its range (not a copy outside it, which a later Ack releases); its key and expiry go
    after the ack window, once a sweep that started after it has finished."""
    store = Store(tmp_path / "s", "n1")
    ids = [f"m{i}" for i in range(100)]
    apply(store, [send(m) for m in ids] + [racks(ids, (0, 0, 99)), send("m5")])
    assert _keys(store, b"A") == [] and len(_keys(store, b"K")) == 1
    policy = ReleasePolicy(ack_window_ms=60_000)
    assert release(store, 0, 102, policy, NOW) == 101  # the 100 Sends and the range ack
    assert [o for o, _ in store.records(0)] == [101]   # the copy at 101 is not in the range
    assert len(_keys(store, b"E")) == 1
    apply(store, [ack("m5")], start=102)
    # the Ack itself, and the copy with the sweep the Ack makes due
    assert release(store, 0, 103, policy, NOW + 5_000) + release(
        store, 0, 103, policy, NOW + 10_000) == 2
    for _ in range(3):
        release(store, 0, 103, policy, NOW + 120_000)
    assert _keys(store, b"K") == [] and _keys(store, b"E") == [] and _keys(store, b"A") == []
    assert list(store.records(0)) == []
    store.close()


def test_a_range_that_does_not_fit_its_record_is_indexed_by_id(tmp_path: Path) -> None:
    """A range naming another partition, or first above last, is read as its ids alone."""
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("a"), send("b"), racks(["a"], (3, 0, 1)), racks(["b"], (0, 1, 0))])
    assert _keys(store, b"K") == [] and len(_keys(store, b"A")) == 2
    assert release(store, 0, 4, ReleasePolicy(), NOW) == 4
    store.close()


def test_a_future_timestamp_cannot_hold_gc_back_for_good(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("a"), ack("a"), send("b", ts=NOW + 86_400_000), ack("b"), send("c"),
                  ack("c")])
    policy = ReleasePolicy(min_age_ms=5_000)
    assert release(store, 0, 6, policy, NOW) == 2  # waits at "b", a day in the future
    assert release(store, 0, 6, policy, NOW + 4_000) == 0
    # "b" is aged from when GC met it: released min_age_ms later, and the rest with it
    assert release(store, 0, 6, policy, NOW + 5_000) == 4
    assert list(store.records(0)) == []


def test_pass_resumes_where_it_stopped_and_visits_each_record_once(tmp_path: Path) -> None:
    """The cursor visits each record once; the Sends it leaves pending are read again by a
    sweep only after an Ack was visited, and only those still pending."""
    from tidemark.replica.release_policy import collect, load_state
    store = Store(tmp_path / "s", "n1")
    apply(store, [send(f"m{i}") for i in range(50)] + [ack(f"m{i}") for i in range(0, 50, 2)])
    first = collect(store, 0, 75, ReleasePolicy(), NOW)
    # the even sends' acks are below the point: released when met; the odd ones are left
    # pending, and a sweep (the acks made one due) reads them again
    assert first.finished and first.visited == 75 and first.swept == 25
    assert first.released == 50
    again = collect(store, 0, 75, ReleasePolicy(), NOW + 60_000)
    assert (again.visited, again.swept, again.released) == (0, 0, 0)  # nothing is re-read
    apply(store, [ack(f"m{i}") for i in range(1, 50, 2)], start=75)
    third = collect(store, 0, 100, ReleasePolicy(), NOW + 1_000)
    assert third.visited == 25 and third.swept == 0 and third.released == 25  # too soon
    assert not third.finished or load_state(store, 0).dirty
    fourth = collect(store, 0, 100, ReleasePolicy(), NOW + 5_000)  # sweep_interval_ms later
    assert fourth.visited == 0 and fourth.swept == 25 and fourth.released == 25
    assert list(store.records(0)) == []


def _gc_records():  # type: ignore[no-untyped-def]
    from hypothesis import strategies as st
    peers, msgs = st.sampled_from(["bob", "eve"]), st.sampled_from(["m0", "m1", "m2"])
    return st.lists(st.one_of(st.tuples(st.just("send"), peers, msgs),
                              st.tuples(st.just("ack"), peers, msgs),
                              st.tuples(st.just("acks"), peers,
                                        st.lists(msgs, min_size=1, max_size=3).map(tuple)),
                              st.tuples(st.just("racks"), peers, st.tuples(
                                  st.lists(msgs, min_size=1, max_size=3).map(tuple),
                                  st.integers(0, 30), st.integers(-3, 30),
                                  st.sampled_from([0, 0, 0, 1]))),
                              st.tuples(st.just("purge"), peers, st.just(""))),
                    min_size=1, max_size=30)


def test_release_is_safe_and_leaves_nothing_behind(tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    """Random Sends (duplicates included), Acks, AckBatches, range acks (some malformed: first
    above last, or another partition: those ack their ids like an AckBatch) and Purges, GC
    points rising in
    steps, passes of random budgets at random times, sweeps at a random interval: a Send is
    released only once acked or purged below the point; in the end every such Send, every
    Ack and every Purge is gone, and so are the purge index entries (the reference model is
    ``due``)."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(_gc_records(), st.lists(st.integers(0, 30), max_size=4), st.integers(1, 50),
           st.sampled_from([0, 5_000]), st.lists(st.integers(0, 3_000), min_size=1))
    # a range ack above the point releases nothing yet; a range that ends before a Send
    # does not cover it
    @example([("send", "bob", "m0"), ("racks", "bob", (("m0",), 0, 0, 0))], [1], 50, 0, [0])
    @example([("send", "bob", "m0"), ("send", "bob", "m0"),
              ("racks", "bob", (("m0",), 0, 0, 0))], [], 50, 0, [0])
    def run(script, points, budget, interval, steps) -> None:  # type: ignore[no-untyped-def]
        store = Store(tmp_path_factory.mktemp("gc"), "n1")
        values = [send(m, p) if kind == "send" else ack(m, p) if kind == "ack"
                  else acks(m, p) if kind == "acks"
                  else racks(m[0], (m[3], m[1], m[1] + m[2]), p) if kind == "racks"
                  else purge(p) for kind, p, m in script]
        apply(store, values)
        n, now, policy = len(script), NOW, ReleasePolicy(sweep_interval_ms=interval)

        def due(s: int, point: int) -> bool:  # the oracle: may Send s go at this point?
            _, p, m = script[s]
            def range_acks(mm: tuple) -> bool:  # type: ignore[type-arg]
                ids, first, width, k = mm
                last = first + width
                ranged = k == 0 and first <= last  # else: the ids alone, as an AckBatch
                return m in ids and (not ranged or first <= s <= last)
            return any((kind == "ack" and (q, mm) == (p, m) and i < point) or
                       (kind == "acks" and q == p and m in mm and i < point) or
                       (kind == "racks" and q == p and range_acks(mm) and i < point) or
                       (kind == "purge" and q == p and s < i < point)
                       for i, (kind, q, mm) in enumerate(script))
        for i, point in enumerate(sorted(min(x, n) for x in points) + [n]):
            for _ in range(n + 2):  # bounded passes until this point is done
                now += steps[i % len(steps)]
                if collect(store, 0, point, policy, now, budget).finished:
                    break
            left = {o for o, _ in store.records(0)}
            for s, (kind, _, _) in enumerate(script):
                if kind == "send" and s not in left:
                    assert due(s, point), (script, point, s)
        for _ in range(2 * n + 4):  # later passes sweep what is left pending
            now += 5_000
            if collect(store, 0, n, policy, now, budget).finished and not \
                    load_state(store, 0).dirty:
                break
        left = {o for o, _ in store.records(0)}
        assert left == {s for s, (kind, _, _) in enumerate(script)
                        if kind == "send" and not due(s, n)}, script
        assert _keys(store, b"U") == [] and _keys(store, b"W") == []
        store.close()
    from tidemark.replica.release_policy import collect, load_state
    run()


def test_a_store_from_before_sweeps_drops_its_pending_index(tmp_path: Path) -> None:
    """A store GC'd by the version with a pending index (``W`` keys, a 24-byte state): the
    index is deleted, and its Sends, still below the cursor, are decided by a sweep."""
    import struct

    from tidemark.replica.release_policy import collect, load_state
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("a"), send("b"), ack("a")])
    old = b"W\x00\x00" + struct.pack(">I", 3) + b"bob"
    store.db.put(old + struct.pack(">I", 1) + b"a" + struct.pack(">Q", 0), b"")
    store.db.put(old + struct.pack(">I", 1) + b"b" + struct.pack(">Q", 1), b"")
    store.db.put(b"G\x00\x00", struct.pack(">qqq", 2, -1, 0))  # both Sends visited
    assert load_state(store, 0).dirty  # an old state gets a sweep
    result = collect(store, 0, 3, ReleasePolicy(), NOW)
    assert _keys(store, b"W") == []
    assert result.released == 2 and [o for o, _ in store.records(0)] == [1]  # "b": no ack
    store.close()


def test_a_new_store_stays_new_until_its_rejoin_is_committed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    assert store.created
    store.close()  # e.g. the config append failed and the node exited
    store = Store(tmp_path / "s", "n1")
    assert store.created  # still new: the next start must rejoin
    store.mark_complete()
    store.close()
    store = Store(tmp_path / "s", "n1")
    assert not store.created
    store.close()


def test_delivery_failures_go_with_their_ack(tmp_path: Path) -> None:
    failed = C.encode("DeliveryFailed", {"message_id": "m", "peer": "bob", "environment": "default",
                                         "sender": "al", "message_type": "t", "reason": "boom",
                                         "timestamp_ms": NOW - 10_000})
    store = Store(tmp_path / "s", "n1")
    apply(store, [send("m"), failed, send("x"), failed.replace(b"boom", b"bang"), ack("m")])
    assert release(store, 0, 5, ReleasePolicy(), NOW) == 4
    assert [o for o, _ in store.records(0)] == [2]  # "x" is not acked
    store.close()
