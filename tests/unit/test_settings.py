"""Settings precedence (defaults < TOML < env < flags), passthrough, and clear config errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.exceptions import ConfigError
from log.settings import load_settings


def test_precedence_and_client_passthrough(tmp_path: Path) -> None:
    cfg = tmp_path / "t.toml"
    cfg.write_text('[kafka]\nbootstrap = "file:9092"\npartitions = 6\ntopic_prefix = "a."\n'
                   '[kafka.client]\n"security.protocol" = "SASL_SSL"\n"sasl.mechanism" = "PLAIN"\n')
    env = {"TIDEMARK_TOPIC_PREFIX": "env.", "TIDEMARK_KAFKA_SASL_USERNAME": "alice"}
    s = load_settings(cfg, env=env, partitions=8)
    assert (s.bootstrap, s.topic_prefix, s.partitions) == ("file:9092", "env.", 8)
    assert s.topic("txlog") == "env.txlog"
    for conf in (s.producer_config(), s.consumer_config(), s.admin_config()):
        assert conf["security.protocol"] == "SASL_SSL"
        assert conf["sasl.mechanism"] == "PLAIN"
        assert conf["sasl.username"] == "alice"
    prod = s.producer_config()
    assert prod["acks"] == "all" and prod["enable.idempotence"] is True
    assert prod["partitioner"] == "murmur2_random"


@pytest.mark.parametrize("body,needle", [
    ("[kafka\nbootstrap=1", "not valid TOML"),
    ('[kafka]\npartitions = "many"\n', "partitions must be int"),
    ('[kafka]\npartitions = 0\n', "must be positive"),
    ('[kafka]\nbogus = 1\n', "unknown key kafka.bogus"),
    ('kafka = 3\n', "must be a table"),
])
def test_bad_config_is_one_clear_error(tmp_path: Path, body: str, needle: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, env={})
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_and_missing_bootstrap(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", env={})
    s = load_settings(env={}, state_dir=tmp_path)
    with pytest.raises(ConfigError, match="no Kafka bootstrap"):
        s.producer_config()
