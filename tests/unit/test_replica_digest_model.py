"""Digests per backfill range (replica.digests) against a reference model: after any
sequence of batches that put, delete and replace records, the digest the store answers for
any range (stored per-range digests plus ragged edges, byte bound included) equals the
digest recomputed from the records, and the stored digests equal a rebuild from scratch.
Real LevelDB (plyvel), no mocks."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.gossip.interval_map import IntervalMap, record_hash
from tidemark.replica.digests import DIGEST_PREFIX, RANGE, rebuild_digests
from tidemark.replica.store import ADOPT_FILE, Store

SPAN = 3 * RANGE + 100  # offsets used: three whole ranges and a ragged one


def reference(model: dict[int, bytes], start: int, end: int, max_bytes: int | None = None
              ) -> tuple[int, int, int]:
    """The digest recomputed from the records, with the byte bound's stop rule."""
    acc = n = size = 0
    for off in sorted(o for o in model if start <= o < end):
        value = model[off]
        if max_bytes is not None and n and size + len(value) > max_bytes:
            return acc, n, off
        acc ^= record_hash(off, value)
        n += 1
        size += len(value)
    return acc, n, end


offsets = st.integers(0, SPAN - 1)
values = st.binary(min_size=1, max_size=40)
op = st.one_of(
    st.tuples(st.just("put"), st.lists(st.tuples(offsets, values), max_size=30)),
    st.tuples(st.just("delete"), st.lists(offsets, max_size=30)),
    st.tuples(st.just("replace"), st.tuples(offsets, st.integers(1, 2 * RANGE)),
              st.lists(values, max_size=20)),
)
ranges = st.tuples(st.integers(0, SPAN), st.integers(0, SPAN + 10),
                   st.one_of(st.none(), st.integers(1, 400)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=12), queries=st.lists(ranges, min_size=1, max_size=12))
def test_range_digest_equals_the_digest_recomputed_from_the_records(ops: list, queries: list
                                                                    ) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s", "a")
        model: dict[int, bytes] = {}
        try:
            for kind, *args in ops:
                batch = store.batch()
                if kind == "put":  # ingest and backfill put offsets not stored yet
                    for off, value in args[0]:
                        if off not in model:
                            batch.put_record(0, off, value)
                            model[off] = value
                elif kind == "delete":  # GC: by offset, stored or not, twice in a batch too
                    for off in args[0] + args[0][:2]:
                        batch.delete_record(0, off)
                        model.pop(off, None)
                else:  # backfill's replace: delete what is held in a range, put the peer's
                    (start, length), new = args
                    for off, _ in store.records(0, start, start + length):
                        batch.delete_record(0, off)
                        model.pop(off, None)
                    for i, value in enumerate(new):
                        off = start + i * max(1, length // max(1, len(new)))
                        if off < start + length:
                            batch.put_record(0, off, value)
                            model[off] = value
                batch.commit()
            assert dict(store.records(0)) == model
            for start, end, max_bytes in queries:
                assert store.digest_upto(0, start, end, max_bytes) == \
                    reference(model, start, end, max_bytes)
                assert store.digest(0, start, end) == reference(model, start, end)[:2]
            stored = dict(store.db.iterator(prefix=DIGEST_PREFIX))
            rebuild_digests(store.db)
            assert dict(store.db.iterator(prefix=DIGEST_PREFIX)) == stored
        finally:
            store.close()


def test_an_adopted_copy_keeps_its_records_and_drops_its_claims(tmp_path: Path) -> None:
    source = Store(tmp_path / "a", "a")
    batch = source.batch()
    for off in range(RANGE + 10):
        batch.put_record(0, off, b"v%d" % off)
    batch.advance("txlog", 0, 0, RANGE + 10)
    batch.commit()
    source.mark_complete()
    source.save_cut({"txlog/0": RANGE}, {}, 0)
    source.close()
    with __import__("pytest").raises(Exception, match="create the file ADOPT"):
        Store(tmp_path / "a", "b")
    (tmp_path / "a" / ADOPT_FILE).touch()
    copy = Store(tmp_path / "a", "b")
    try:
        assert copy.adopted_from == "a" and copy.created  # new until its rejoin commits
        m = copy.map("txlog", 0)
        assert m.base_end == 0 and m.gaps() == [(0, RANGE + 10)]
        assert copy.position("txlog", 0) == RANGE + 10
        assert copy.load_cut() is None
        assert copy.digest(0, 0, RANGE + 10) == reference(
            {o: b"v%d" % o for o in range(RANGE + 10)}, 0, RANGE + 10)[:2]
        batch = copy.batch()  # ingest resumes at the copied position
        batch.advance("txlog", 0, RANGE + 10, RANGE + 12)
        batch.commit()
        assert copy.map("txlog", 0).gaps() == [(0, RANGE + 10)]
        assert not (tmp_path / "a" / ADOPT_FILE).exists()
    finally:
        copy.close()
    assert IntervalMap(0, 0, [[5, 5]]).gaps() == [(0, 5)]
