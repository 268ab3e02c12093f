"""``tidemark bench queues``: the Spark job's throughput and send->queue latency, beside a raw
confluent-kafka consumer reading the same txlog in the same run.

Phases, on a fresh topic set (deleted afterwards) and a fresh checkpoint:

1. **startup**: start ``tidemark queues run``; time until its first progress record.
2. **backlog** (``backlog`` > 0): that many Sends to one peer that never acks (a peer that is
   down), written as fast as the producer goes; time until the job's progress covers them.
   The later phases then run with that backlog in the job's state.
3. **latency**: after a warm-up round at the same rate (JIT, Python workers, caches; not
   counted), Sends at ``rate``/s for ``seconds`` to 50 other peers; a consumer on ``queues``
   timestamps each QueueEntry as it arrives; p50/p99 of arrival minus send time.
4. **throughput**: a backlog of ``transactions`` (Sends, half of them acked) written as fast
   as the producer goes; the job's rate is transactions / (time until progress covers the
   end offsets, from the first record written). The raw baseline reads the same records with
   a plain consumer; the ratio is job / raw.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tidemark.log.load import generate_load
from tidemark.log.offsets import end_offsets
from tidemark.log.producer import LogProducer
from tidemark.log.queue_state import is_progress_key, purge_key_peer, split_queue_key
from tidemark.log.settings import Settings
from tidemark.log.topics import delete_topic_set, ensure_topics
from tidemark.stack.queues_job import JobProcess

__all__ = ["bench_queues", "print_report", "write_backlog", "BACKLOG_PEER"]

#: Targets: send->queue p99 (seconds, at 2,000 msgs/s, with or without a backlog) and the
#: job's rate as a share of the plain consumer's in the same run.
P99_TARGET_S, TARGET_RATIO = 2.0, 0.3
#: The peer that is down during the backlog phase (no other phase sends to it).
BACKLOG_PEER = "down-peer"


def _say(msg: str) -> None:
    print(f"bench queues: {msg}", file=sys.stderr, flush=True)


def _group_rss_mb(pgid: int) -> float:
    """Resident memory of every process in the job's process group (driver, JVM, workers)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[2]) == pgid:
                total += int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    return round(total / 2**20, 1)


def _batch_seconds(checkpoint: Path) -> dict[str, float]:
    """Micro-batch durations from the checkpoint: offsets/N written -> commits/N written."""
    spans = []
    for planned in (checkpoint / "offsets").glob("[0-9]*"):
        done = checkpoint / "commits" / planned.name
        if done.exists():
            spans.append(done.stat().st_mtime - planned.stat().st_mtime)
    spans.sort()
    if not spans:
        return {}
    return {"batches": len(spans), "p50_s": round(spans[len(spans) // 2], 2),
            "max_s": round(spans[-1], 2)}


def _dir_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 2)


class _EntryWatcher(threading.Thread):
    """Records the arrival time of every QueueEntry appended to ``queues`` from now on."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.arrived: dict[str, float] = {}
        self.stop = threading.Event()
        self.consumer = Consumer(settings.consumer_config(**{"fetch.wait.max.ms": 50}))
        ends = end_offsets(settings, "queues")
        self.consumer.assign([TopicPartition(settings.topic("queues"), p, o)
                              for p, o in ends.items()])

    def run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(10000, 0.1):
                if msg.error() or msg.value() is None:
                    continue
                key = (msg.key() or b"").decode("utf-8", "replace")
                if not is_progress_key(key) and purge_key_peer(key) is None:
                    self.arrived.setdefault(split_queue_key(key)[1], time.time())
        self.consumer.close()


def _latency_phase(settings: Settings, job: JobProcess, rate: int, seconds: float,
                   tag: str) -> dict[str, Any]:
    watcher = _EntryWatcher(settings)
    watcher.start()
    producer = LogProducer(settings)
    sent: dict[str, float] = {}
    env, payload = settings.environment, os.urandom(150)
    total = int(rate * seconds)
    start = time.time()
    for i in range(total):
        delay = start + i / rate - time.time()
        if delay > 0.001:  # pacing the offered load in bursts of <= 1 ms, not synchronization
            time.sleep(delay)
        peer, mid = f"peer-{i % 50}", f"{tag}-{i}"
        now = time.time()
        producer.produce("txlog", peer, "Send", {
            "message_id": mid, "sender": "bench", "recipient": peer, "environment": env,
            "message_type": "bench.Event", "payload": payload,
            "timestamp_ms": int(now * 1000), "delivery_count": 0})
        sent[mid] = now
        if i % 200 == 0:
            producer.poll(0)
            if i % (rate * 5) == 0 and i:
                _say(f"latency phase: {i}/{total} sends")
    producer.flush()
    job.wait_for_progress(120)
    deadline = time.monotonic() + 10
    while len(watcher.arrived) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.05)
    watcher.stop.set()
    watcher.join(5)
    lat = sorted(watcher.arrived[m] - t for m, t in sent.items() if m in watcher.arrived)
    if not lat:
        return {"sends": total, "entries_seen": 0}
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return {"sends": total, "rate": rate, "entries_seen": len(lat),
            "p50_s": round(q[49], 3), "p99_s": round(q[98], 3), "max_s": round(lat[-1], 3)}


def write_backlog(settings: Settings, count: int, peer: str = BACKLOG_PEER,
                  payload_bytes: int = 150) -> dict[int, int]:
    """``count`` Sends to ``peer`` (never acked), as fast as the producer goes; returns
    txlog's end offsets once Kafka acknowledged them all."""
    producer = LogProducer(settings)
    topic, encode = producer.topic("txlog"), producer.codec.encode
    env, payload, run = settings.environment, os.urandom(payload_bytes), uuid.uuid4().hex[:8]
    for i in range(count):
        producer.produce_raw(topic, peer, encode("Send", {
            "message_id": f"{run}-{i}", "sender": "bench", "recipient": peer,
            "environment": env, "message_type": "bench.Backlog", "payload": payload,
            "timestamp_ms": int(time.time() * 1000), "delivery_count": 0}))
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush()
    return end_offsets(settings, "txlog")


def _backlog_phase(settings: Settings, job: JobProcess, count: int) -> dict[str, Any]:
    t0 = time.monotonic()
    ends = write_backlog(settings, count)
    written = time.monotonic() - t0
    job.wait_for_progress(max(600.0, count / 500), ends)
    took = time.monotonic() - t0
    return {"messages": count, "peer": BACKLOG_PEER, "produce_s": round(written, 1),
            "job_s": round(took, 1), "job_msgs_per_s": round(count / took)}


def _raw_read(settings: Settings, start: dict[int, int], end: dict[int, int]) -> float:
    consumer = Consumer(settings.consumer_config())
    consumer.assign([TopicPartition(settings.topic("txlog"), p, o) for p, o in start.items()])
    todo = {p: e for p, e in end.items() if e > start.get(p, 0)}
    count = 0
    t0 = time.perf_counter()
    while todo:
        for msg in consumer.consume(10000, 1.0):
            if msg.error():
                continue
            count += 1
            part, offset = msg.partition() or 0, msg.offset() or 0
            if part in todo and offset + 1 >= todo[part]:
                del todo[part]
    elapsed = time.perf_counter() - t0
    consumer.close()
    return count / elapsed


def bench_queues(settings: Settings, transactions: int = 100_000, rate: int = 2000,
                 seconds: float = 20.0, trigger_ms: int = 500,
                 state_dir: str | None = None, backlog: int = 0) -> dict[str, Any]:
    """Run the phases; returns the figures (see the module docstring). ``backlog``: Sends
    queued for one down peer before the latency phase (0: none)."""
    bench = settings.with_overrides(topic_prefix=f"{settings.topic_prefix}bench-"
                                                 f"{uuid.uuid4().hex[:6]}.")
    ensure_topics(bench)
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-queues-", dir=state_dir))
    job = JobProcess(bench, work / "checkpoint", work / "job.log", trigger=f"{trigger_ms}ms")
    result: dict[str, Any] = {"trigger_ms": trigger_ms, "partitions": bench.partitions,
                              "load_average_start": round(os.getloadavg()[0], 1)}
    try:
        _say(f"starting the job (topics {bench.topic_prefix}*, log {job.log_file})")
        job.start()
        generate_load(bench, peers=10, messages=100, ack_ratio=0.0)
        job.wait_for_progress(300)
        result["startup_s"] = round(time.monotonic() - job.started_at, 1)
        if backlog > 0:
            _say(f"backlog phase: {backlog} Sends to {BACKLOG_PEER}, never acked")
            result["backlog"] = _backlog_phase(bench, job, backlog)
            _say(f"backlog materialized in {result['backlog']['job_s']}s")
        warmup = min(seconds, 15.0)
        _say(f"first output after {result['startup_s']}s; warm-up: {rate}/s for {warmup:.0f}s"
             " (not counted)")
        result["warmup_latency"] = _latency_phase(bench, job, rate, warmup, "warm")
        _say(f"latency phase: {rate}/s for {seconds:.0f}s")
        result["latency"] = _latency_phase(bench, job, rate, seconds, "lat")
        result["rss_mb_after_latency"] = _group_rss_mb(job.pid)
        _say(f"throughput phase: backlog of {transactions} transactions")
        start = end_offsets(bench, "txlog")
        t0 = time.monotonic()
        from tidemark.gossip.record_signing import load_sealers
        # acks as peers write them (signed AckBatch): the job refuses unsigned ones
        load = generate_load(bench, peers=100, messages=int(transactions / 1.5), ack_ratio=0.5,
                             sealers=load_sealers(bench.environment,
                                                  Path(state_dir) if state_dir else None))
        produced_s = time.monotonic() - t0
        end = {int(p): o for p, o in load.end_offsets.items()}
        job.wait_for_progress(600, end)
        job_s = time.monotonic() - t0
        n = sum(end.values()) - sum(start.values())
        result["throughput"] = {"transactions": n, "produce_s": round(produced_s, 2),
                                "job_s": round(job_s, 2),
                                "job_tx_per_s": round(n / job_s)}
        _say("raw baseline: plain confluent-kafka consumer over the same records")
        raw = _raw_read(bench, start, end)
        result["throughput"]["raw_consumer_tx_per_s"] = round(raw)
        result["throughput"]["ratio"] = round(n / job_s / raw, 4)
        result["rss_mb_after_throughput"] = _group_rss_mb(job.pid)
        result["state_store_mb"] = _dir_mb(work / "checkpoint" / "state")
        result["p99_target_s"] = P99_TARGET_S
        result["target_ratio"] = TARGET_RATIO
        result["batch_duration"] = _batch_seconds(work / "checkpoint")
        result["load_average_end"] = round(os.getloadavg()[0], 1)
    except BaseException:
        _say(f"failed; the job's log and checkpoint are kept in {work}")
        raise
    finally:
        job.stop()
        delete_topic_set(bench, report=_say)
    shutil.rmtree(work, ignore_errors=True)
    return result


def print_report(r: dict[str, Any]) -> None:
    """Human-readable lines, each figure beside its baseline or target."""
    lat, thr = r.get("latency", {}), r.get("throughput", {})
    print(f"job startup (to first output)  : {r.get('startup_s')} s")
    if r.get("backlog"):
        b = r["backlog"]
        print(f"backlog for one down peer      : {b['messages']:,} Sends written in"
              f" {b['produce_s']} s, materialized in {b['job_s']} s"
              f" ({b['job_msgs_per_s']:,} msgs/s); the phases below run with it in the state")
    print(f"job throughput                 : {thr.get('job_tx_per_s', 0):>10,} tx/s"
          f"  ({thr.get('transactions', 0):,} transactions)")
    print(f"raw consumer, same records     : {thr.get('raw_consumer_tx_per_s', 0):>10,} tx/s")
    print(f"ratio                          : {thr.get('ratio', 0):>10.4f}"
          f"  ({'meets' if thr.get('ratio', 0) >= r.get('target_ratio', 0) else 'MISSES'}"
          f" >= {r.get('target_ratio')})")
    verdict = "meets" if lat.get("p99_s", 1e9) < r.get("p99_target_s", P99_TARGET_S) else "MISSES"
    print(f"send -> queue entry latency    : p50 {lat.get('p50_s')} s, p99 {lat.get('p99_s')} s"
          f" at {lat.get('rate')}/s, trigger {r.get('trigger_ms')} ms ({verdict} p99 < "
          f"{r.get('p99_target_s')} s)")
    print(f"micro-batch duration           : {r.get('batch_duration')}")
    print(f"machine load average           : {r.get('load_average_start')} at start,"
          f" {r.get('load_average_end')} at end (2 cores are shared with the brokers)")
    print(f"job memory (RSS, all processes): {r.get('rss_mb_after_latency')} MB after latency,"
          f" {r.get('rss_mb_after_throughput')} MB after throughput; state store"
          f" {r.get('state_store_mb')} MB")
