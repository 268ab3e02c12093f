"""The console as an operator meets it: ``--version``, global flags after the command, and
every configuration mistake as one ``tidemark: error:`` line with a non-zero exit (no
traceback): a librdkafka key it does not know, a Java-only key, a value out of range."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidemark.console import unexpected


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    return subprocess.run([sys.executable, "-m", "tidemark", *args], capture_output=True,
                          text=True, timeout=60, env={**base, **env})


def one_line_error(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode != 0, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tidemark: error: "), out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_version() -> None:
    out = run("--version")
    assert out.returncode == 0 and out.stdout.startswith("tidemark "), out


@pytest.mark.parametrize("env,needles", [
    ({"TIDEMARK_KAFKA_BOGUS_SETTING": "1"}, ("bogus.setting",)),
    ({"TIDEMARK_KAFKA_SASL_JAAS_CONFIG": "x required;"}, ("sasl.username",)),
    ({"TIDEMARK_KAFKA_LINGER_MS": "-5"}, ("outside allowed range",)),
    ({"TIDEMARK_PRODUCER_MAX_IN_FLIGHT": "9"}, ("between 1 and 5",)),
    ({"TIDEMARK_PARTITIONS": "many"}, ("TIDEMARK_PARTITIONS",)),
    ({"TIDEMARK_KAFKA_ACKS": "1"}, ("acks=all",)),
    ({"TIDEMARK_KAFKA_LINGER_MS": "5"}, ("TIDEMARK_PRODUCER_LINGER_MS",)),
], ids=["unknown-key", "java-only-key", "out-of-range-client", "out-of-range-setting",
        "not-a-number", "owned-key", "key-of-a-setting"])
def test_a_bad_setting_is_one_line(env: dict[str, str], needles: tuple[str, ...],
                                   tmp_path: Any) -> None:
    one_line_error(run("queues", "depth", "--bootstrap", "127.0.0.1:1", **env), *needles)


def test_global_flags_after_the_command() -> None:
    out = run("log", "tail", "--help", "--log-level", "DEBUG")
    assert out.returncode == 0 and "usage: tidemark log tail" in out.stdout, out


def test_an_unexpected_error_is_one_line() -> None:
    line = unexpected(KafkaException(KafkaError(KafkaError._TRANSPORT, "broker gone\nretry")))
    assert line.startswith("tidemark: error: KafkaException: broker gone retry")
    assert "\n" not in unexpected(RuntimeError("two\nlines"))


def test_every_option_and_positional_has_help() -> None:
    import argparse

    from tidemark.console import build_parser
    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, [*path, name])
            elif not isinstance(a, (argparse._HelpAction, argparse._VersionAction)) \
                    and not a.help:
                missing.append(f"{' '.join(path)} {'/'.join(a.option_strings) or a.dest}")
    walk(build_parser(), ["tidemark"])
    assert not missing, missing
