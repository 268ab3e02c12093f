"""``tidemark bench ingest``: records/s one node applies, beside a raw baseline.

Both sides run in a fresh child process over the same records in the same run: the raw
baseline is a plain confluent_kafka consumer writing each record to plyvel (one write batch
per consumed batch); the node side is the replica's Ingestor (checked scan of each value or
a full decode, indexes, interval map and position in one write batch) over a store with the
default memory options. Each child reports its rate and peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = ["run_bench"]


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _raw_worker(settings: Any, ends: dict[int, int], folder: str, out: Any) -> None:
    import plyvel
    from confluent_kafka import Consumer, TopicPartition
    db = plyvel.DB(folder, create_if_missing=True)
    consumer = Consumer(settings.consumer_config(**{
        "queued.min.messages": 200000, "fetch.max.bytes": 16 << 20,
        "max.partition.fetch.bytes": 4 << 20, "fetch.wait.max.ms": 20}))
    topic = settings.topic("txlog")
    consumer.assign([TopicPartition(topic, k, 0) for k in ends])
    total, done = sum(ends.values()), 0
    pack = struct.Struct(">HQ").pack
    started = time.perf_counter()
    while done < total:
        msgs = consumer.consume(20000, 0.5)
        with db.write_batch() as wb:
            for m in msgs:
                if m.error() is None:
                    wb.put(pack(m.partition(), m.offset()), m.value())
                    done += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    db.close()
    out.put({"records": done, "seconds": elapsed, "peak_rss_mib": _peak_rss_mib()})


def _node_worker(settings: Any, ends: dict[int, int], folder: str, out: Any) -> None:
    from replica.ingest import Ingestor
    from replica.store import Store
    store = Store(folder, "bench")
    ingest = Ingestor(settings, store, "bench")
    ingest.assign(list(ends))
    started = time.perf_counter()
    while any((store.position("txlog", k) or 0) < e for k, e in ends.items()):
        ingest.step(0.2)
    elapsed = time.perf_counter() - started
    ingest.close()
    store.close()
    out.put({"records": ingest.applied, "seconds": elapsed, "peak_rss_mib": _peak_rss_mib()})


def _child(target: Any, *args: Any) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get(timeout=900)
    proc.join(60)
    return result


def run_bench(args: argparse.Namespace) -> int:
    """Produce ``--records`` txlog records, then time both consumers over them."""
    from log.load import generate_load
    from log.offsets import end_offsets
    from log.settings import load_settings
    from log.topics import delete_topic_set, ensure_topics
    settings = load_settings(args.config, bootstrap=args.bootstrap,
                             topic_prefix=(args.topic_prefix
                                           or f"bench-ingest-{uuid.uuid4().hex[:8]}."),
                             partitions=args.partitions)
    say = lambda m: print(f"bench ingest: {m}", file=sys.stderr, flush=True)  # noqa: E731
    ensure_topics(settings)
    messages = max(1, int(args.records / 1.5))  # half the sends are acked: 1.5 records each
    say(f"writing ~{args.records} records (Sends and Acks) to {settings.topic('txlog')}")
    generate_load(settings, peers=1000, messages=messages, ack_ratio=0.5,
                  progress=lambda d, t: say(f"produced {d}/{t} sends") if d % 100000 == 0
                  or d == t else None)
    say("measuring (each side in a fresh process)")
    ends = {k: o for k, o in end_offsets(settings, "txlog").items()}
    total = sum(ends.values())
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="tidemark-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        say(f"raw baseline: plain consumer + plyvel over {total} records")
        raw = _child(_raw_worker, settings, ends, str(scratch / "raw"))
        say(f"node ingest: replica Ingestor over {total} records")
        node = _child(_node_worker, settings, ends, str(scratch / "node"))
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
        if not args.topic_prefix:
            delete_topic_set(settings)
    raw_rate = raw["records"] / raw["seconds"]
    node_rate = node["records"] / node["seconds"]
    result = {"records": total, "node_tx_per_s": round(node_rate),
              "raw_tx_per_s": round(raw_rate), "ratio": round(node_rate / raw_rate, 3),
              "node_peak_rss_mib": round(node["peak_rss_mib"], 1),
              "raw_peak_rss_mib": round(raw["peak_rss_mib"], 1), "target_tx_per_s": 100_000}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"node ingest:  {result['node_tx_per_s']:>10,} tx/s   (peak RSS "
              f"{result['node_peak_rss_mib']} MiB)")
        print(f"raw baseline: {result['raw_tx_per_s']:>10,} tx/s   (peak RSS "
              f"{result['raw_peak_rss_mib']} MiB)")
        print(f"ratio:        {result['ratio']:>10}      (target >= 100,000 tx/s: "
              f"{'met' if node_rate >= 100_000 else 'NOT met'})")
    return 0
