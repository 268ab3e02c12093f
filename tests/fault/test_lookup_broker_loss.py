"""Kafka lookups ride through the loss of one broker (issue 8, item 3).

* A broker SIGKILLed while ``tidemark load`` runs (mid-way, and right as it looks up txlog's
  end offsets after the last ack): ``load`` exits 0 and its summary equals what a plain
  consumer reads from txlog.
* A broker SIGKILLed right before ``queues depth --json``, the watermark lookups and the
  start-up checks: each succeeds, with the same answers as before the kill.
* An unreachable bootstrap is one line ("cannot reach Kafka at ... within N s"), without a
  traceback; a cluster without the topics is one line naming them.

The broker-killing tests share one 3-broker cluster of their own (the module's); before each,
the killed broker is restarted and the test waits until every partition is fully in sync.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests import cluster
from tests.support import wait_for
from tidemark.log.exceptions import KafkaUnreachableError, LogError, TopicsMissingError
from tidemark.log.offsets import end_offsets, log_start_offsets, topic_partitions, watermarks
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.producer import LogProducer
from tidemark.log.settings import TOPICS, Settings, load_settings
from tidemark.log.topics import describe_topics, ensure_topics, require_topics
from tidemark.log.wire import default_codec
from tidemark.stack.launcher import LocalStack

TIDEMARK = str(Path(sys.executable).with_name("tidemark"))
UNREACHABLE = "127.0.0.1:1"
PARTITIONS = 6


# ---- helpers ------------------------------------------------------------------------------

def _env(state_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI run: no TIDEMARK_* of the caller, a state folder of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TIDEMARK_") or k == "TIDEMARK_CACHE"}
    env["TIDEMARK_STATE_DIR"] = str(state_dir)
    env.update(extra)
    return env


def _assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    err = proc.stderr.strip()
    assert proc.returncode == 1, (proc.returncode, proc.stdout, err)
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("tidemark: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


def _fresh(stack: LocalStack) -> Settings:
    settings = load_settings(env={}, bootstrap=stack.state["bootstrap"],
                             topic_prefix=f"lk{uuid.uuid4().hex[:8]}.", partitions=PARTITIONS)
    ensure_topics(settings)
    return settings


def _metadata(bootstrap: str, topic: str | None = None):  # noqa: ANN202 - ClusterMetadata
    try:
        return AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5)
    except KafkaException:
        return None


def _in_sync(stack: LocalStack) -> bool:
    """Three brokers registered and every partition of every topic has a full ISR."""
    md = _metadata(stack.state["bootstrap"])
    return bool(md and len(md.brokers) == 3 and all(
        p.leader >= 0 and len(p.isrs) == len(p.replicas)
        for t in md.topics.values() for p in t.partitions.values()))


def _leader(settings: Settings, logical: str, partition: int = 0) -> int:
    topic = settings.topic(logical)

    def leader() -> int | None:
        md = _metadata(settings.bootstrap, topic)
        meta = md.topics.get(topic) if md is not None else None
        if meta is None or partition not in meta.partitions:
            return None
        lead = meta.partitions[partition].leader
        return lead if lead >= 0 else None
    return int(wait_for(leader, timeout=30, what=f"a leader for {topic}[{partition}]"))


def _read_txlog(settings: Settings, ends: dict[int, int], timeout_s: float = 120.0
                ) -> tuple[Counter[str], Counter[str], int]:
    """Sends per recipient, Acks per peer and records, read by a plain consumer up to ``ends``."""
    topic = settings.topic("txlog")
    consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "lookup-test",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    decode = default_codec().decode
    sends: Counter[str] = Counter()
    acks: Counter[str] = Counter()
    records = ack_records = 0
    try:
        todo = {p: e for p, e in ends.items() if e > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + timeout_s
        while todo:
            assert time.monotonic() < deadline, f"txlog not read to {ends} (left: {todo})"
            for msg in consumer.consume(10000, 0.5):
                if msg.error():
                    continue
                records += 1
                rec = decode(msg.value())
                if rec.name == "Send":
                    sends[rec.record["recipient"]] += 1
                elif rec.name == "Ack":
                    acks[rec.record["peer"]] += 1
                    ack_records += 1
                elif rec.name == "AckBatch":  # signed acks: what load writes when it can sign
                    acks[rec.record["peer"]] += len(rec.record["message_ids"])
                    ack_records += 1
                if msg.partition() in todo and msg.offset() + 1 >= todo[msg.partition()]:
                    del todo[msg.partition()]
    finally:
        consumer.close()
    return sends, acks, records, ack_records


def _raw_ends(settings: Settings) -> dict[int, int]:
    """High watermarks read with a bare consumer (retried here: the cluster may be settling)."""
    topic = settings.topic("txlog")

    def ends() -> dict[int, int] | None:
        consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": "lookup-test"})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    for p in range(PARTITIONS)}
        except KafkaException:
            return None
        finally:
            consumer.close()
    return dict(wait_for(ends, timeout=60, what="txlog watermarks"))  # type: ignore[arg-type]


class _Progress:
    """Follows ``load: done/total`` on a child's stderr (carriage-return progress lines)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.text = ""
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        while chunk := os.read(fd, 4096):
            self.text += chunk.decode("utf-8", "replace")

    def done(self) -> int:
        found = re.findall(r"load: (\d+)/\d+", self.text)
        return int(found[-1]) if found else 0

    def join(self) -> str:
        self._thread.join(timeout=30)
        return self.text


# ---- unreachable: no cluster needed ----------------------------------------------------------

def test_unreachable_lookup_fails_fast_and_typed() -> None:
    """end_offsets and log_start_offsets are watermarks; explicit partitions skip metadata."""
    settings = load_settings(env={}, bootstrap=UNREACHABLE)
    calls = {"watermarks": lambda: watermarks(settings, "txlog", timeout=6),
             "end_offsets": lambda: end_offsets(settings, "txlog", [0, 1], timeout=6),
             "require_topics": lambda: require_topics(settings, ("txlog", "queues"), timeout=6)}

    def timed(call: Callable[[], object]) -> tuple[BaseException | None, float]:
        started = time.monotonic()
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - checked below
            return exc, time.monotonic() - started
        return None, time.monotonic() - started
    with ThreadPoolExecutor(len(calls)) as pool:  # the three wait out their deadlines together
        outcomes = dict(zip(calls, pool.map(timed, calls.values()), strict=True))
    assert set(outcomes) == set(calls)
    for name, (exc, elapsed) in outcomes.items():
        assert isinstance(exc, KafkaUnreachableError), (name, exc)
        assert elapsed < 15, f"{name} took {elapsed:.1f}s for a 6 s deadline"
        assert str(exc).startswith(f"cannot reach Kafka at {UNREACHABLE} within")


def test_unreachable_bootstrap_is_one_line_per_command(tmp_path: Path) -> None:
    """Each command run concurrently; each ends in one line within the default deadline."""
    commands = {
        "queues depth": [TIDEMARK, "queues", "depth", "--bootstrap", UNREACHABLE],
        "queues depth --json --peer": [TIDEMARK, "queues", "depth", "--json", "--peer",
                                       "peer-1", "--bootstrap", UNREACHABLE],
        "topics describe": [TIDEMARK, "topics", "describe", "--bootstrap", UNREACHABLE],
        "load": [TIDEMARK, "load", "--messages", "10", "--bootstrap", UNREACHABLE],
        "log.inspect": [sys.executable, "-m", "tidemark.log.inspect"],
        "cluster show": [TIDEMARK, "cluster", "show", "--bootstrap", UNREACHABLE],
    }
    env = _env(tmp_path)
    started = time.monotonic()
    procs = {name: subprocess.Popen(argv, env={**env, **(
        {"TIDEMARK_BOOTSTRAP": UNREACHABLE} if name == "log.inspect" else {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, argv in commands.items()}
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        results[name] = (subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
                         time.monotonic() - started)
    for name, (proc, elapsed) in results.items():
        _assert_one_line_error(proc, f"cannot reach Kafka at {UNREACHABLE} within")
        assert elapsed < 60, f"{name}: {elapsed:.1f}s to say Kafka is unreachable"


# ---- a cluster of the module's own, with a broker killed ------------------------------------

@pytest.fixture(scope="module")
def lookup_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    if os.environ.get("TIDEMARK_BOOTSTRAP"):
        pytest.skip("fault drills need a cluster the tests start themselves")
    with cluster.elsewhere():
        stack = LocalStack(tmp_path_factory.mktemp("lookup-stack"))
        try:
            stack.up(brokers=3)
            yield stack
        finally:
            stack.down(grace_s=5.0)  # a broker without its quorum never finishes a clean stop


@pytest.fixture
def healthy(lookup_stack: LocalStack) -> LocalStack:
    """The module's cluster with all three brokers up (a killed one restarted) and in sync."""
    lookup_stack.up(brokers=3)
    wait_for(lambda: _in_sync(lookup_stack), timeout=180, interval=0.5,
             what="three brokers with every partition fully in sync")
    return lookup_stack


@pytest.mark.integration
@pytest.mark.fault
@pytest.mark.parametrize("kill_at", [0.2, 1.0], ids=["mid-load", "at-end-offsets"])
def test_load_rides_through_a_broker_kill(healthy: LocalStack, tmp_path: Path,
                                         kill_at: float) -> None:
    """kill_at=1.0: the progress line for the last record is printed after the final flush,
    right before load looks up txlog's end offsets: the lookup meets the dead leader."""
    settings = _fresh(healthy)
    messages = 120_000
    victim = _leader(settings, "txlog")
    proc = subprocess.Popen(
        [TIDEMARK, "load", "--bootstrap", settings.bootstrap, "--topic-prefix",
         settings.topic_prefix, "--peers", "40", "--messages", str(messages), "--ack-ratio",
         "0.5", "--seed", "8", "--json"],
        env=_env(tmp_path, TIDEMARK_PROGRESS="1"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    progress = _Progress(proc)
    try:
        wait_for(lambda: progress.done() >= kill_at * messages or proc.poll() is not None,
                 timeout=300, interval=0.02, what=f"load at {kill_at:.0%}")
        assert proc.poll() is None, f"load ended before the kill: {progress.text[-500:]}"
        healthy.kill(f"broker-{victim}")
        out, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = progress.join()
    assert proc.returncode == 0, f"load failed after the kill: {err[-2000:]}"
    summary = json.loads(out)

    ends = {int(p): o for p, o in summary["end_offsets"].items()}
    assert sorted(ends) == list(range(PARTITIONS))
    sends, acks, records, ack_records = _read_txlog(settings, ends)
    assert summary["sent"] == messages == sum(sends.values())
    assert summary["acked"] == sum(acks.values())
    assert {p: s["sent"] for p, s in summary["peers"].items()} == dict(sends)
    assert {p: s["acked"] for p, s in summary["peers"].items() if s["acked"]} == dict(acks)
    assert records == sum(ends.values()) == summary["sent"] + ack_records
    assert _raw_ends(settings) == ends, "load's end offsets are not txlog's"


def _write_queues(settings: Settings) -> tuple[dict[str, int], dict[str, int]]:
    """Some txlog records, queue entries and progress records; returns depth and progress."""
    producer = LogProducer(settings)
    env = settings.environment
    for i in range(600):
        producer.produce("txlog", f"peer-{i % 7}", "Send", {
            "message_id": f"m{i}", "sender": "s", "recipient": f"peer-{i % 7}",
            "environment": env, "message_type": "t", "payload": b"x", "timestamp_ms": i,
            "delivery_count": 0})
    depth: Counter[str] = Counter()
    for i in range(300):
        peer = f"peer-{i % 7}"
        part = partition_for_peer(peer, PARTITIONS)  # as the job writes: the Send's partition
        producer.produce("queues", f"{peer}\x00m{i}", "QueueEntry", {
            "peer": peer, "message_id": f"m{i}", "sender": "s", "message_type": "t",
            "payload": b"x", "timestamp_ms": i, "txlog_partition": part,
            "txlog_offset": i, "delivery_count": 0}, partition=part)
        depth[peer] += 1
    progress = {}
    for p in range(PARTITIONS):
        producer.produce("queues", f"__progress__.{p}", "QueueProgress", {
            "txlog_partition": p, "next_offset": 100 + p, "batch_id": 1, "timestamp_ms": 1},
            partition=p)
        progress[str(p)] = 100 + p
    producer.flush(60)
    return dict(sorted(depth.items())), progress


@pytest.mark.integration
@pytest.mark.fault
def test_lookups_right_after_a_broker_kill(healthy: LocalStack, tmp_path: Path) -> None:
    settings = _fresh(healthy)
    depth, progress = _write_queues(settings)
    before_txlog = watermarks(settings, "txlog")
    before_queues = watermarks(settings, "queues")
    victim = _leader(settings, "queues")

    healthy.kill(f"broker-{victim}")
    cli = [TIDEMARK, "queues", "depth", "--json", "--bootstrap", settings.bootstrap,
           "--topic-prefix", settings.topic_prefix]
    depth_proc = subprocess.Popen(cli, env=_env(tmp_path), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
    # In this process meanwhile: every lookup, right after the kill, must succeed unchanged.
    assert watermarks(settings, "queues") == before_queues
    assert watermarks(settings, "txlog") == before_txlog
    assert end_offsets(settings, "txlog") == {p: hi for p, (_, hi) in before_txlog.items()}
    assert log_start_offsets(settings, "queues") == {p: lo for p, (lo, _)
                                                     in before_queues.items()}
    assert end_offsets(settings, "txlog", [0, 1]) == {p: before_txlog[p][1] for p in (0, 1)}
    assert topic_partitions(settings, "txlog") == list(range(PARTITIONS))
    assert require_topics(settings) == {t: (PARTITIONS if t in ("txlog", "queues", "purges") else
                                            1 if t == "config" else 3) for t in TOPICS}
    assert describe_topics(settings)[settings.topic("txlog")]["partitions"] == PARTITIONS
    from tidemark.log.inspect import count_txlog
    counts, _ = count_txlog(settings)
    assert counts["Send"] == 600

    out, err = depth_proc.communicate(timeout=120)
    assert depth_proc.returncode == 0, f"queues depth failed after the kill: {err}"
    report = json.loads(out)
    assert report == {"progress": progress, "peers": depth, "total": sum(depth.values())}

    peer_proc = subprocess.run(cli + ["--peer", "peer-3"], env=_env(tmp_path),
                               capture_output=True, text=True, timeout=120)
    assert peer_proc.returncode == 0, peer_proc.stderr
    assert json.loads(peer_proc.stdout)["peers"] == {"peer-3": depth["peer-3"]}


@pytest.mark.integration
@pytest.mark.fault
def test_job_start_check_right_after_a_broker_kill(healthy: LocalStack) -> None:
    """The queues job's start-up check (txlog, queues, deadletter) right after a kill."""
    settings = _fresh(healthy)
    victim = _leader(settings, "txlog", 1)
    healthy.kill(f"broker-{victim}")
    counts = require_topics(settings, ("txlog", "queues", "deadletter"))
    assert counts == {"txlog": PARTITIONS, "queues": PARTITIONS, "deadletter": 3}
    pytest.importorskip("pyspark")
    from tidemark.spark_streaming.job import check_topics
    assert check_topics(settings) == PARTITIONS


@pytest.mark.integration
def test_missing_topics_are_one_line(healthy: LocalStack, tmp_path: Path) -> None:
    settings = load_settings(env={}, bootstrap=healthy.state["bootstrap"],
                             topic_prefix=f"absent{uuid.uuid4().hex[:6]}.")
    started = time.monotonic()
    with pytest.raises(TopicsMissingError) as info:
        require_topics(settings)
    assert info.value.topics == [settings.topic(t) for t in TOPICS]
    assert "tidemark topics create" in str(info.value)
    with pytest.raises(TopicsMissingError):
        watermarks(settings, "txlog")
    with pytest.raises(TopicsMissingError):
        end_offsets(settings, "txlog", [0])
    assert time.monotonic() - started < 20, "a missing topic must not wait for the deadline"
    existing = _fresh(healthy)
    started = time.monotonic()
    with pytest.raises(LogError, match="has no partition 99"):
        end_offsets(existing, "txlog", [0, 99])
    assert time.monotonic() - started < 10, "a missing partition must not wait for the deadline"
    for argv in (["queues", "depth"], ["load", "--messages", "5"]):
        proc = subprocess.run([TIDEMARK, *argv, "--bootstrap", settings.bootstrap,
                               "--topic-prefix", settings.topic_prefix],
                              env=_env(tmp_path), capture_output=True, text=True, timeout=120)
        _assert_one_line_error(proc, "not exist", "tidemark topics create")
