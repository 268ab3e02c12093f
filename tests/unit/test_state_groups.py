"""The state group count is chosen once per checkpoint and never changes under it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.spark_streaming.exceptions import QueuesError
from tidemark.spark_streaming.state_groups import MARKER, choose_groups, local_checkpoint


def test_new_local_checkpoint_takes_the_default_and_keeps_it(tmp_path: Path) -> None:
    cp = str(tmp_path / "cp")
    assert choose_groups(cp, None, 2, 12) == 2
    assert (tmp_path / "cp" / MARKER).read_text().strip() == "2"
    # a later start with another default (more cores) keeps the checkpoint's count
    assert choose_groups(cp, None, 4, 12) == 2
    assert choose_groups(f"file://{cp}", None, 4, 12) == 2


def test_a_checkpoint_from_before_groups_keeps_one_group_per_partition(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1")
    assert choose_groups(str(tmp_path), None, 2, 12) == 12
    assert (tmp_path / MARKER).read_text().strip() == "12"


def test_requested_count_is_recorded_and_cannot_change(tmp_path: Path) -> None:
    assert choose_groups(str(tmp_path), 3, 2, 12) == 3
    assert choose_groups(str(tmp_path), 3, 2, 12) == 3
    with pytest.raises(QueuesError, match="keeps its state in 3 groups"):
        choose_groups(str(tmp_path), 5, 2, 12)
    with pytest.raises(QueuesError, match="at least 1"):
        choose_groups(str(tmp_path / "other"), 0, 2, 12)


def test_a_corrupt_marker_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / MARKER).write_text("two\n")
    with pytest.raises(QueuesError, match="not a state group count"):
        choose_groups(str(tmp_path), None, 2, 12)


def test_remote_checkpoints_default_to_one_group_per_partition() -> None:
    assert local_checkpoint("s3a://bucket/cp") is None
    assert local_checkpoint("file:///tmp/x") == Path("/tmp/x")
    assert local_checkpoint("rel/cp") == Path("rel/cp")
    assert choose_groups("hdfs://nn/cp", None, 2, 12) == 12
    assert choose_groups("hdfs://nn/cp", 4, 2, 12) == 4
