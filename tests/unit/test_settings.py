"""Settings precedence (defaults < TOML < env < flags), passthrough, and clear config errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidemark.log.exceptions import ConfigError
from tidemark.log.settings import load_settings


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


def _cli(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "tidemark", *args], capture_output=True,
                          text=True, env=full, timeout=60)


def test_a_bad_variable_is_one_error_line_for_any_command() -> None:
    for args in (["local", "status"], ["local", "up"], ["replica", "status"]):
        proc = _cli(args, TIDEMARK_BROKERS="abc")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(lines) == 1, proc.stderr
        assert lines[0].startswith("tidemark: error:") and "TIDEMARK_BROKERS" in lines[0]


def test_a_bad_flag_value_is_one_error_line() -> None:
    proc = _cli(["local", "up", "--brokers", "x"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "must be an integer" in proc.stderr


def test_every_flag_names_its_variable_in_help() -> None:
    proc = _cli(["queues", "run", "--help"])
    assert "TIDEMARK_ACK_TTL" in proc.stdout and "TIDEMARK_SPARK_CHECKPOINT" in proc.stdout


def test_registry_parses_and_rejects() -> None:
    from tidemark.log import registry
    assert registry.env_value("ack_ttl", {"TIDEMARK_ACK_TTL": "2h"}) == 7_200_000
    assert registry.env_value("ack_ttl", {}) == 86_400_000
    with pytest.raises(ConfigError, match="TIDEMARK_PARTITIONS"):
        registry.check_environment({"TIDEMARK_PARTITIONS": "0"})
    registry.check_environment({"TIDEMARK_UNRELATED_THING": "x", "TIDEMARK_PARTITIONS": "4"})


def test_consumers_refetch_soon_after_draining_their_queue() -> None:
    """librdkafka knows every consumer key (building a client checks them, no broker needed),
    and a consumer that went over its local queue thresholds fetches again within tens of
    milliseconds, not librdkafka's default second (the replica ingest starved without it)."""
    from confluent_kafka import Consumer
    s = load_settings(env={}, bootstrap="127.0.0.1:9")
    conf = s.consumer_config(**{"queued.min.messages": 50000})
    assert conf["fetch.queue.backoff.ms"] <= 50
    Consumer(conf).close()


def test_a_client_setting_wins_over_tidemarks_tuning_and_owned_keys_are_refused() -> None:
    """``[kafka.client]`` passes through: its tuning keys (compression, fetch waits, queue
    sizes) win over Tidemark's defaults and a component's own ``extra``; a key one of
    Tidemark's settings controls names that setting, and a changed value of a key Tidemark's
    correctness rests on is refused, each in one line; repeating the required value is fine."""
    env = {"TIDEMARK_KAFKA_COMPRESSION_TYPE": "zstd", "TIDEMARK_KAFKA_FETCH_WAIT_MAX_MS": "10",
           "TIDEMARK_KAFKA_ACKS": "all", "TIDEMARK_KAFKA_ISOLATION_LEVEL": "read_committed"}
    s = load_settings(env=env, bootstrap="127.0.0.1:9")
    prod = s.producer_config()
    assert prod["compression.type"] == "zstd" and prod["acks"] == "all"
    assert prod["batch.num.messages"] == 10000                       # not named: the default
    assert s.consumer_config(**{"fetch.wait.max.ms": 500})["fetch.wait.max.ms"] == "10"
    assert s.consumer_config(**{"queued.min.messages": 50000})["queued.min.messages"] == 50000
    assert s.producer_config(**{"message.max.bytes": 99})["message.max.bytes"] == 99
    for bad, needle in [
        ({"TIDEMARK_KAFKA_LINGER_MS": "5"}, "TIDEMARK_PRODUCER_LINGER_MS"),
        ({"TIDEMARK_KAFKA_MESSAGE_MAX_BYTES": "2000000"}, "TIDEMARK_MAX_MESSAGE_BYTES"),
        ({"TIDEMARK_KAFKA_MAX_IN_FLIGHT": "1"}, "TIDEMARK_PRODUCER_MAX_IN_FLIGHT"),
        ({"TIDEMARK_KAFKA_ACKS": "1"}, "acks=all"),
        ({"TIDEMARK_KAFKA_ENABLE_IDEMPOTENCE": "false"}, "enable.idempotence=true"),
        ({"TIDEMARK_KAFKA_PARTITIONER": "consistent_random"}, "murmur2"),
        ({"TIDEMARK_KAFKA_ISOLATION_LEVEL": "read_uncommitted"}, "read_committed"),
        ({"TIDEMARK_KAFKA_AUTO_OFFSET_RESET": "latest"}, "auto.offset.reset=earliest"),
    ]:
        with pytest.raises(ConfigError) as info:
            load_settings(env=bad, bootstrap="127.0.0.1:9")
        assert needle in str(info.value) and "\n" not in str(info.value), info.value
