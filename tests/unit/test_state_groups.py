"""The state groups (count and keys) are chosen once per checkpoint and never change under it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.spark_streaming.exceptions import QueuesError
from tidemark.spark_streaming.state_groups import (
    MARKER,
    GroupLayout,
    choose_groups,
    local_checkpoint,
    spread_keys,
)

#: Where a made-up hash sends keys 0..15 among 2 partitions: 0 and 1 together, as Spark's does.
TWO = {k: 0 if k in (2, 5, 6, 9) else 1 for k in range(16)}


def _spread(count: int) -> tuple[int, ...]:
    return spread_keys(count, TWO, 2)


def test_new_local_checkpoint_takes_the_default_and_keeps_it(tmp_path: Path) -> None:
    cp = str(tmp_path / "cp")
    assert choose_groups(cp, None, 2, 12).count == 2
    assert (tmp_path / "cp" / MARKER).read_text().strip() == "2"
    # a later start with another default (more cores) keeps the checkpoint's count
    assert choose_groups(cp, None, 4, 12) == GroupLayout(2, (0, 1))
    assert choose_groups(f"file://{cp}", None, 4, 12, _spread).count == 2


def test_a_new_local_checkpoint_spreads_its_keys_and_keeps_them(tmp_path: Path) -> None:
    layout = choose_groups(str(tmp_path), None, 2, 12, _spread)
    assert not layout.plain
    assert layout.keys == (2, 0)  # each group a partition of its own: TWO[2] = 0, TWO[0] = 1
    assert (tmp_path / MARKER).read_text() == "2\nkeys 2 0\n"
    # read back as written, whatever the spread function would say now
    assert choose_groups(str(tmp_path), None, 2, 12, lambda n: (9, 9)) == layout
    assert choose_groups(str(tmp_path), 2, 2, 12) == layout


def test_a_marker_with_a_count_only_keeps_the_plain_keys(tmp_path: Path) -> None:
    (tmp_path / MARKER).write_text("2\n")
    assert choose_groups(str(tmp_path), None, 2, 12, _spread) == GroupLayout(2, (0, 1))


def test_a_checkpoint_from_before_groups_keeps_one_group_per_partition(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1")
    assert choose_groups(str(tmp_path), None, 2, 12, _spread) == GroupLayout(12, tuple(range(12)))
    assert (tmp_path / MARKER).read_text().strip() == "12"


def test_requested_count_is_recorded_and_cannot_change(tmp_path: Path) -> None:
    assert choose_groups(str(tmp_path), 3, 2, 12).count == 3
    assert choose_groups(str(tmp_path), 3, 2, 12).count == 3
    with pytest.raises(QueuesError, match="keeps its state in 3 groups"):
        choose_groups(str(tmp_path), 5, 2, 12)
    with pytest.raises(QueuesError, match="at least 1"):
        choose_groups(str(tmp_path / "other"), 0, 2, 12)


@pytest.mark.parametrize("text, error", [
    ("two\n", "not a state group count"),
    ("2\nkeys 1\n", "not the keys of 2 state groups"),
    ("2\nkeys 1 1\n", "not the keys of 2 state groups"),
    ("2\nkeys a b\n", "not the keys of 2 state groups"),
    ("2\nvalues 1 2\n", "not the keys of 2 state groups"),
])
def test_a_corrupt_marker_is_one_clear_error(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / MARKER).write_text(text)
    with pytest.raises(QueuesError, match=error):
        choose_groups(str(tmp_path), None, 2, 12)


def test_remote_checkpoints_default_to_one_group_per_partition() -> None:
    assert local_checkpoint("s3a://bucket/cp") is None
    assert local_checkpoint("file:///tmp/x") == Path("/tmp/x")
    assert local_checkpoint("rel/cp") == Path("rel/cp")
    assert choose_groups("hdfs://nn/cp", None, 2, 12, _spread) == GroupLayout(12, tuple(range(12)))
    # no marker to keep spread keys in: the plain ones, the same on every start
    assert choose_groups("hdfs://nn/cp", 2, 2, 12, _spread) == GroupLayout(2, (0, 1))


@given(st.integers(1, 8), st.integers(1, 4),
       st.lists(st.integers(0, 3), min_size=4, max_size=64))
def test_spread_keys_put_each_group_where_asked_or_fall_back(
        count: int, partitions: int, where: list[int]) -> None:
    partition_of = {k: p % partitions for k, p in enumerate(where)}
    keys = spread_keys(count, partition_of, partitions)
    assert len(keys) == count and len(set(keys)) == count
    need = [sum(1 for g in range(count) if g % partitions == p) for p in range(partitions)]
    have = [sum(1 for v in partition_of.values() if v == p) for p in range(partitions)]
    if all(h >= n for h, n in zip(have, need, strict=True)):
        assert all(partition_of[k] == g % partitions for g, k in enumerate(keys))
    else:  # some group's partition has too few candidates: the plain keys
        assert keys == tuple(range(count))
