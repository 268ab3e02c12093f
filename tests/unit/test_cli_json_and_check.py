"""What scripts rely on, without a cluster: ``--json`` on every leaf command (one JSON object
on stdout; the text output unchanged without it), ``--check`` and its exit code 3 (benches
below their printed target, ``local settle`` on a machine that stayed busy), and ``peer
list`` showing an unreadable queue depth as unknown rather than 0."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidemark.bench import targets
from tidemark.console import build_parser, main
from tidemark.log.exceptions import LogError
from tidemark.options import EXIT_MISSED, bench_exit, check_exit, finish_check
from tidemark.stack.settle import Settled, Window

#: The long-running services: their output is their JSON log lines, they take no --json.
DAEMONS = {("replica", "run"), ("queues", "run")}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TIDEMARK_"):
            monkeypatch.delenv(name)


def leaves() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs and path:
            found[path] = parser
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, (*path, name))
    walk(build_parser(), ())
    return found


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


# ---- --json on every leaf -------------------------------------------------------------------
def test_every_leaf_but_the_two_daemons_takes_json() -> None:
    found = leaves()
    assert len(found) >= 30 and set(found) >= DAEMONS
    missing = [" ".join(p) for p, parser in found.items()
               if p not in DAEMONS and "--json" not in options(parser)]
    assert not missing, missing
    assert all("--json" not in options(found[p]) for p in DAEMONS)


@pytest.mark.parametrize("argv", [
    ["local", "down"], ["local", "kill", "broker-1"], ["local", "settle"],
    ["topics", "create"], ["cluster", "remove-node", "p0r1"],
    ["cluster", "add-node", "p0r2", "--partition", "p0", "--address", "127.0.0.1:7301"],
    ["cluster", "show"], ["peer", "token", "billing"], ["ca", "init"], ["ca", "rotate"],
    ["ca", "revoke", "1f"], ["ca", "show"],
], ids=lambda argv: " ".join(argv[:2]))
def test_the_leaves_that_lacked_json_parse_it(argv: list[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(argv).json is False
    args = parser.parse_args([*argv, "--json"])
    assert args.json is True and callable(args.func)


def test_a_daemon_refuses_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["replica", "run", "--node", "p0r0", "--json"])
    assert exited.value.code == 2
    assert "--json" in capsys.readouterr().err


class FakeStack:
    def down(self, grace_s: float) -> list[str]:
        return ["p0r0", "broker-1"]

    def kill(self, name: str) -> int:
        return 4242


@pytest.mark.parametrize("argv,text,doc", [
    (["local", "down"], "stopped: p0r0, broker-1\n", {"stopped": ["p0r0", "broker-1"]}),
    (["local", "kill", "broker-1"], "killed broker-1 (pid 4242) with SIGKILL\n",
     {"name": "broker-1", "pid": 4242}),
])
def test_local_down_and_kill(argv: list[str], text: str, doc: dict[str, Any],
                             monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    import tidemark.commands.local as local
    monkeypatch.setattr(local, "_stack", lambda args: FakeStack())
    assert main(argv) == 0
    assert capsys.readouterr().out == text        # the text output as it was
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc  # the whole of stdout: one object


def test_ca_commands_print_what_they_wrote(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    pki = str(tmp_path / "pki")
    assert main(["ca", "init", "--dir", pki, "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["created"] is True and made["ca"]["generation"] == 1
    assert "CN=tidemark CA 1" in made["ca"]["subject"]
    assert all(Path(f).is_file() for f in made["written"]) and len(made["written"]) == 4
    serial1 = made["ca"]["serial"]

    assert main(["ca", "init", "--dir", pki, "--exist-ok", "--json"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert kept["created"] is False and kept["written"] == []
    assert kept["ca"]["serial"] == serial1

    assert main(["ca", "rotate", "--dir", pki, "--json"]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["ca"]["generation"] == 2 and rotated["ca"]["serial"] != serial1
    assert rotated["ca"]["cert"].endswith("ca-2.crt")

    assert main(["ca", "revoke", "1F", "--dir", pki, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["serials"] == ["1f"]
    assert main(["ca", "revoke", "2a", "--dir", pki, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"folder": pki, "revoked": "2a", "serials": ["1f", "2a"],
                                  "crl": f"{pki}/crl.pem"}

    assert main(["ca", "revoke", "3b", "--dir", pki]) == 0  # text as before
    assert capsys.readouterr().out.startswith("revoked 3b; 3 serial(s) on the list.")
    for flags in ([], ["--json"]):                          # show: JSON either way
        assert main(["ca", "show", "--dir", pki, *flags]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["cas"] == ["ca-1.crt", "ca-2.crt"] and shown["revoked"] == ["1f", "2a", "3b"]


def test_peer_token_document(tmp_path: Path) -> None:
    from tidemark.commands.peer import token_doc
    assert token_doc("billing", "prod", "tok", None) == {
        "peer": "billing", "environment": "prod", "token": "tok", "file": None}
    doc = token_doc("billing", "prod", "tok", str(tmp_path / "t"))
    assert doc["file"] == str(tmp_path / "t") and Path(doc["file"]).is_absolute()


def test_topics_create_document(tmp_path: Path) -> None:
    from tidemark.commands.txlog import topics_created_doc
    from tidemark.log.settings import load_settings
    settings = load_settings(None, state_dir=tmp_path, bootstrap="10.0.0.1:9092",
                             topic_prefix="x.")
    doc = topics_created_doc(settings, ["x.txlog"])
    assert doc == {"bootstrap": "10.0.0.1:9092", "created": ["x.txlog"],
                   "topics": {"txlog": "x.txlog", "queues": "x.queues",
                              "directory": "x.directory", "config": "x.config",
                              "deadletter": "x.deadletter", "purges": "x.purges"}}


def test_a_cluster_change_prints_its_epoch(capsys: pytest.CaptureFixture[str]) -> None:
    from tidemark.commands.cluster import _committed
    from tidemark.gossip.cluster_config import Epoch, Partition
    epoch = Epoch(7, 6, 4, {"p0r0": "127.0.0.1:7300"},
                  (Partition("p0", (0, 1, 2, 3), ("p0r0",), ()),), 1, "remove p0r1")
    assert _committed(argparse.Namespace(json=False), epoch) == 0
    assert capsys.readouterr().out == "epoch 7: remove p0r1\n"
    assert _committed(argparse.Namespace(json=True), epoch) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == epoch.to_record() and doc["epoch"] == 7 and doc["reason"] == "remove p0r1"


# ---- --check and exit code 3 -----------------------------------------------------------------
def test_check_exit_is_3_only_when_asked_and_missed() -> None:
    assert EXIT_MISSED == 3
    assert check_exit(["ratio 0.7 < 0.8"], check=True) == 3
    assert check_exit(["ratio 0.7 < 0.8"], check=False) == 0
    assert check_exit([], check=True) == 0


def test_every_bench_and_settle_take_check() -> None:
    found = leaves()
    benches = {p: parser for p, parser in found.items() if p[0] == "bench"}
    assert {p[1] for p in benches} >= {"produce", "send", "stable", "ingest", "gc", "queues",
                                       "replay", "catchup"}
    for path, parser in benches.items():
        assert "--check" in options(parser), path
        assert callable(parser.get_default("bench_misses")), path
    assert "--check" in options(found[("local", "settle")])


BENCH_RESULTS = [  # (bench, result that meets, result that misses, a word of the miss)
    (targets.produce, {"ratio": 0.85, "target_ratio": 0.8},
     {"ratio": 0.79, "target_ratio": 0.8}, "ratio 0.79 < 0.8"),
    (targets.send, {"ratio": 0.9, "target_ratio": 0.8, "security_met": None},
     {"ratio": 0.9, "target_ratio": 0.8, "security_met": False, "security_ratio": 0.7,
      "security_target_ratio": 0.9}, "security_ratio 0.7 < 0.9"),
    (targets.stable, {"stable_p99_ms": 100, "target_p99_ms": 100, "security_met": True},
     {"stable_p99_ms": 140.5, "target_p99_ms": 100}, "stable p99 140.5 ms > 100 ms"),
    (targets.stable, {"stable_p99_ms": 80, "target_p99_ms": 100, "ratio_p99": 4.0,
                      "target_ratio_p99": 4, "security_met": None},
     {"stable_p99_ms": 80, "target_p99_ms": 100, "ratio_p99": 4.5, "target_ratio_p99": 4},
     "stable p99 4.5 x the raw producer's > 4 x"),
    (targets.ingest, {"node_tx_per_s": 100_000, "target_tx_per_s": 100_000},
     {"node_tx_per_s": 99_000, "target_tx_per_s": 100_000}, "99000 < 100000"),
    (targets.gc, {"met": True, "target_ratio": 0.8},
     {"met": False, "target_ratio": 0.8, "gc_min_age_0": {"ratio": 0.7},
      "gc_min_age_24h": {"ratio": 0.9}}, "0.7"),
    (targets.queues, {"latency": {"p99_s": 1.9}, "p99_target_s": 2,
                      "throughput": {"ratio": 0.3}, "target_ratio": 0.3},
     {"latency": {}, "p99_target_s": 2}, "p99"),
    (targets.queues, {"latency": {"p99_s": 1.9}, "p99_target_s": 2},
     {"latency": {"p99_s": 1.9}, "p99_target_s": 2, "throughput": {"ratio": 0.22},
      "target_ratio": 0.3}, "job 0.22 x the plain consumer < 0.3 x"),
    (targets.replay, {"peer_msgs_per_s": 120_000, "target_msgs_per_s": 100_000, "ratio": 0.6,
                      "target_ratio": 0.5},
     {"peer_msgs_per_s": 120_000, "target_msgs_per_s": 100_000, "ratio": None,
      "target_ratio": 0.5}, "ratio 0 < 0.5"),
    (targets.catchup, {"misses": []},
     {"misses": ["time to normal 15.5 s > 15.0 s"]}, "time to normal 15.5 s"),
]


@pytest.mark.parametrize("misses,met,missed,word", BENCH_RESULTS,
                         ids=[b[0].__name__ for b in BENCH_RESULTS])
def test_each_bench_decides_as_its_printed_verdict(misses: Any, met: dict[str, Any],
                                                   missed: dict[str, Any], word: str) -> None:
    assert misses(met) == []
    found = misses(missed)
    assert found and any(word in m for m in found), found


def test_a_bench_below_target_exits_3_with_check(capsys: pytest.CaptureFixture[str]) -> None:
    below = {"ratio": 0.5, "target_ratio": 0.8}
    args = argparse.Namespace(check=True, bench="produce", bench_misses=targets.produce)
    assert bench_exit(args, below) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tidemark: bench produce missed its target: ratio 0.5 < 0.8"
                   " (--check: exit 3)"]
    assert bench_exit(args, {"ratio": 0.9, "target_ratio": 0.8}) == 0
    args.check = False
    assert bench_exit(args, below) == 0
    assert capsys.readouterr().err == ""


def busy(quiet: bool) -> Settled:
    return Settled(quiet, 120.4, Window(busy=0.93, steal=0.01, pressure=None))


def test_settle_figures_and_misses() -> None:
    assert busy(True).misses(0.5) == []
    (miss,) = busy(False).misses(0.5)
    assert "NOT quiet after 120 s" in miss and "0.93 cores busy" in miss
    doc = busy(False).as_json(0.5)
    json.dumps(doc)
    assert doc["quiet"] is False and doc["busy_cores"] == 0.93
    assert doc["threshold_cores"] == 0.5 and doc["waited_s"] == 120.4
    assert doc["cpu_pressure_pct"] is None and len(doc["load_average"]) == 3


@pytest.mark.parametrize("flags,code", [([], 0), (["--check"], 3)])
def test_settle_cli_exit_code(flags: list[str], code: int, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    import tidemark.commands.local as local
    monkeypatch.setattr(local, "wait_quiet", lambda *a, **k: busy(False))
    assert main(["local", "settle", *flags]) == code
    out = capsys.readouterr()
    assert out.out.startswith("machine NOT quiet (still above 0.5 cores): 0.93 of")
    assert len(out.out.splitlines()) == 1
    if code:
        (line,) = out.err.strip().splitlines()
        assert line.startswith("tidemark: local settle: machine NOT quiet") and "exit 3" in line
    else:
        assert out.err == ""
    assert main(["local", "settle", "--json", *flags]) == code
    assert json.loads(capsys.readouterr().out)["quiet"] is False
    monkeypatch.setattr(local, "wait_quiet", lambda *a, **k: busy(True))
    assert main(["local", "settle", "--check"]) == 0


def test_finish_check_is_silent_without_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert finish_check(argparse.Namespace(), "local settle", ["busy"]) == 0
    assert capsys.readouterr().err == ""


# ---- peer list: an unreadable queue depth is unknown, not 0 ----------------------------------
ROWS = [{"peer_id": "billing", "environment": "prod", "endpoint": "127.0.0.1:5000", "up": True,
         "incarnation": "abcdef0123456789", "heartbeat_age_s": 1.5},
        {"peer_id": "ledger", "environment": "prod", "endpoint": None, "up": False,
         "incarnation": "0123", "heartbeat_age_s": 42}]


def rows() -> list[dict[str, Any]]:
    return [dict(r) for r in ROWS]


def test_peer_list_depths_when_the_lookup_works() -> None:
    from tidemark.commands.peer import list_lines, with_depths
    got = rows()
    assert with_depths(got, lambda: {"billing": 12}) is None
    assert [r["queue_depth"] for r in got] == [12, 0]
    lines = list_lines(got)
    assert lines[1].split()[-1] == "12" and lines[2].split()[-1] == "0"
    assert lines[0].split()[-1] == "queue"


@pytest.mark.parametrize("error,reason", [
    (KafkaException(KafkaError(KafkaError._TRANSPORT, "broker\ndown")), "broker down"),
    (LogError("topic tidemark.queues does not exist"), "does not exist"),
], ids=["kafka", "tidemark"])
def test_peer_list_depth_unknown_when_the_lookup_raises(error: Exception, reason: str) -> None:
    from tidemark.commands.peer import list_lines, with_depths

    def lookup() -> dict[str, int]:
        raise error
    got = rows()
    why = with_depths(got, lookup)
    assert why is not None and reason in why and "\n" not in why
    assert [r["queue_depth"] for r in got] == [None, None]
    assert [line.split()[-1] for line in list_lines(got)[1:]] == ["?", "?"]
    assert '"queue_depth": null' in json.dumps(got)


def test_peer_list_cli_warns_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    import tidemark.commands.peer as peer
    import tidemark.peer_client.operator as operator
    from tidemark.spark_streaming.exceptions import QueuesError

    def unreadable(args: Any) -> Any:
        def lookup() -> dict[str, int]:
            raise QueuesError("cannot read tidemark.queues: timed out")
        return lookup
    monkeypatch.setattr(operator, "list_peers", lambda *a, **k: rows())
    monkeypatch.setattr(peer, "_depth_lookup", unreadable)
    base = ["peer", "list", "--bootstrap", "127.0.0.1:1", "--state-dir", str(tmp_path)]
    assert main([*base, "--json"]) == 0
    out = capsys.readouterr()
    assert [r["queue_depth"] for r in json.loads(out.out)] == [None, None]
    (warning,) = out.err.strip().splitlines()
    assert warning.startswith("tidemark: warning: queue depth unknown (shown as null)")
    assert "timed out" in warning
    assert main(base) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[1].split()[-1] == "?"
    assert "(shown as ?)" in out.err


def test_a_bug_in_the_lookup_is_not_hidden() -> None:
    from tidemark.commands.peer import with_depths

    def broken() -> dict[str, int]:
        raise TypeError("a bug, not an unreadable topic")
    with pytest.raises(TypeError):
        with_depths(rows(), broken)
