"""The spellings Kafka users type: ``--bootstrap-server`` for ``--bootstrap`` and kcat's
``-X key=value`` for a librdkafka setting, which wins over the file and the environment and
is checked up front (a bad key is one ``tidemark: error:`` line, exit 2)."""

from __future__ import annotations

import subprocess
import sys

from tidemark.options import Parser, add_command, settings_from_args


def _parse(argv: list[str]) -> object:
    parser = Parser(prog="tidemark")
    sub = parser.add_subparsers(dest="command")
    add_command(sub, "probe", lambda a: 0, "a probe")
    return parser.parse_args(["probe", *argv])


def test_bootstrap_server_is_an_alias_and_x_sets_client_keys(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA_CLIENT_ID", "from-env")
    args = _parse(["--bootstrap-server", "10.0.0.1:9092", "-X", "client.id=from-flag",
                   "-X", "socket.timeout.ms=9000", "--state-dir", str(tmp_path)])
    settings = settings_from_args(args)  # type: ignore[arg-type]
    assert settings.bootstrap == "10.0.0.1:9092"
    assert settings.client["client.id"] == "from-flag"      # -X wins over the environment
    assert settings.client["socket.timeout.ms"] == "9000"


def test_a_bad_x_is_one_line_and_exit_2(tmp_path) -> None:
    for bad, words in ((["-X", "no-equals-sign"], "expected key=value"),
                       (["-X", "bogus.key=1"], "bogus.key")):
        out = subprocess.run([sys.executable, "-m", "tidemark", "queues", "depth",
                              "--bootstrap-server", "127.0.0.1:1", "--state-dir", str(tmp_path),
                              *bad], capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and out.stdout == "", out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tidemark: error:"), out.stderr
        assert words in lines[0], lines[0]
