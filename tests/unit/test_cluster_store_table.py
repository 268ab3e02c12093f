"""A cluster file's ``[store]`` table: the keys it sets reach StoreOptions, the ones it
leaves take StoreOptions' defaults (declared once, in the dataclass), and a bad table is one
clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.replica.config import ClusterConfigError, load_cluster_file
from tidemark.replica.store import StoreOptions
from tidemark.stack.replicas import write_cluster_file

KAFKA = {"bootstrap": "127.0.0.1:9", "topic_prefix": "t.", "partitions": 4}


def cluster(tmp_path: Path, store: str) -> Path:
    return write_cluster_file(tmp_path / "cluster.toml", KAFKA, "2x1", 4, extra=store)


def test_set_keys_are_read_and_the_rest_default_to_store_options(tmp_path: Path) -> None:
    got = load_cluster_file(cluster(tmp_path, "\n[store]\ncache_mb = 8\ntable_file_mb = 4\n"))
    assert got.store == StoreOptions(cache_mb=8, table_file_mb=4)
    assert got.store.write_buffer_mb == StoreOptions().write_buffer_mb
    assert load_cluster_file(cluster(tmp_path, "")).store == StoreOptions()


@pytest.mark.parametrize("table, words", [
    ("cache_size = 8", "unknown key store.cache_size"),
    ("open_tables = 10", "store.open_tables must be an integer >= 64"),
    ("write_buffer_mb = 0", "store.write_buffer_mb must be an integer >= 1"),
    ('cache_mb = "big"', "store.cache_mb must be an integer"),
])
def test_a_bad_store_table_is_one_clear_error(tmp_path: Path, table: str, words: str) -> None:
    with pytest.raises(ClusterConfigError) as err:
        load_cluster_file(cluster(tmp_path, f"\n[store]\n{table}\n"))
    assert words in str(err.value) and "\n" not in str(err.value)
