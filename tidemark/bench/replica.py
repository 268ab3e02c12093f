"""``tidemark bench ingest``: records/s one node applies, beside a raw baseline; and
:func:`gc_bench`: ingest with GC running on a 1M-record store beside ingest without GC.

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
import os
import shutil
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tidemark.options import bench_exit

__all__ = ["run_bench", "gc_bench"]


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
    from tidemark.replica.ingest import Ingestor
    from tidemark.replica.store import Store
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
    from tidemark.log.load import generate_load
    from tidemark.log.offsets import end_offsets
    from tidemark.log.settings import load_settings
    from tidemark.log.topics import delete_topic_set, ensure_topics
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
    return bench_exit(args, result)


# ---- ingest with GC running ---------------------------------------------------------------
def _fill_worker(settings: Any, ends: dict[int, int], folder: str, out: Any) -> None:
    from tidemark.replica.ingest import Ingestor
    from tidemark.replica.store import Store
    store = Store(folder, "bench")
    ingest = Ingestor(settings, store, "bench")
    ingest.assign(list(ends))
    while any((store.position("txlog", k) or 0) < e for k, e in ends.items()):
        ingest.step(0.2)
    ingest.close()
    store.close()
    out.put({"records": ingest.applied})


def _gc_side_worker(settings: Any, ends: dict[int, int], folder: str, min_age_ms: int,
                    gc_on: bool, out: Any) -> None:
    """Ingest everything up to ``ends`` into the store at ``folder``, with the GC thread
    running throughout (``gc_on``) or not; with GC, then GC alone for 5 s (ingest idle) for
    its release rate. GC point: the node's own base ends, as in a one-replica cluster."""
    from tidemark.replica.config import ReleasePolicy
    from tidemark.replica.gc_worker import GcWorker
    from tidemark.replica.ingest import Ingestor
    from tidemark.replica.store import Store
    store = Store(folder, "bench")
    ingest = Ingestor(settings, store, "bench")
    parts = sorted(ends)
    ingest.assign(parts)
    worker = GcWorker(store, lambda: parts,
                      lambda: {f"txlog/{k}": store.map("txlog", k).base_end for k in parts},
                      ReleasePolicy(min_age_ms=min_age_ms, gc_interval_ms=500),
                      idle=ingest.has_slack)  # as the node wires it
    if gc_on:
        worker.start()
    t0, c0 = time.perf_counter(), time.process_time()
    while any((store.position("txlog", k) or 0) < e for k, e in ends.items()):
        ingest.step(0.2)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    released_during, idle_rate = worker.released, 0.0
    if gc_on:  # then GC alone for a while, ingest idle (it keeps polling)
        idle_started = time.perf_counter()
        while time.perf_counter() - idle_started < 5.0:
            ingest.step(0.05)
        idle_rate = (worker.released - released_during) / (time.perf_counter() - idle_started)
        worker.stop()
    records = ingest.applied
    ingest.close()
    store.close()
    out.put({"records": records, "seconds": seconds, "cpu": cpu,
             "gc_released_during_ingest": released_during, "gc_passes": worker.passes,
             "gc_idle_release_per_s": idle_rate, "peak_rss_mib": _peak_rss_mib()})


#: The order of the runs per minimum age: GC off, on, on, off (drift falls on both sides).
GC_RUN_ORDER = (False, True, True, False)


def gc_bench(bootstrap: str | None = None, config: str | None = None,
             store_records: int = 1_000_000, ingest_records: int = 1_000_000,
             partitions: int = 4, folder: str | None = None,
             say: Any = lambda m: None) -> dict[str, Any]:
    """Ingest throughput with GC running on a ``store_records`` store, beside the same
    ingest without GC, for minimum ages 0 and 24 h. Returns a dict (rates, ratios, what GC
    did); the target is a ratio of at least 0.8.

    A store is filled with ``store_records`` txlog records (Sends, half of them acked)
    through a real Ingestor, then ``ingest_records`` more are written to Kafka. For each
    minimum age, four fresh processes each ingest all of them into a fresh copy of the
    filled store, GC off, on, on, off (:data:`GC_RUN_ORDER`): at 0, GC has the whole store to
    release meanwhile; at 24 h every record is younger, so GC must cost nothing. Each side's
    rate is its records over its wall time (process CPU seconds are reported too).
    Whole runs rather than alternating slices of one run: LevelDB's compactions (counted in
    the process's CPU) come at a period of their own, and with slices of 100,000 records
    they kept falling on the GC-off slices (22 us of CPU per record in those against 5-7),
    which made ingest *with* GC come out 1.7-2.6 times faster at 24 h.
    """
    from tidemark.log.load import generate_load
    from tidemark.log.offsets import end_offsets
    from tidemark.log.settings import load_settings
    from tidemark.log.topics import delete_topic_set, ensure_topics
    settings = load_settings(config, bootstrap=bootstrap, partitions=partitions,
                             topic_prefix=f"bench-gc-{uuid.uuid4().hex[:8]}.")
    ensure_topics(settings)
    scratch = Path(folder or tempfile.mkdtemp(prefix="tidemark-gcbench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[tuple[bool, dict]]] = {}
    load = [_loadavg()]
    try:
        say(f"writing ~{store_records} records to fill the store")
        generate_load(settings, peers=1000, messages=max(1, int(store_records / 1.5)),
                      ack_ratio=0.5, seed=1)
        fill_ends = dict(end_offsets(settings, "txlog"))
        base = scratch / "base"
        _child(_fill_worker, settings, fill_ends, str(base))
        say(f"store filled with {sum(fill_ends.values())} records; writing "
            f"~{ingest_records} more")
        generate_load(settings, peers=1000, messages=max(1, int(ingest_records / 1.5)),
                      ack_ratio=0.5, seed=2)
        ends = dict(end_offsets(settings, "txlog"))
        for name, min_age in (("gc_min_age_0", 0), ("gc_min_age_24h", 86_400_000)):
            sides: list[tuple[bool, dict]] = []
            for i, gc_on in enumerate(GC_RUN_ORDER):
                copy = scratch / f"{name}-{i}"
                shutil.copytree(base, copy)
                os.sync()  # the copy's writeback is done before the run, not during it
                say(f"{name}: run {i + 1}/{len(GC_RUN_ORDER)}, GC {'on' if gc_on else 'off'}")
                sides.append((gc_on, _child(_gc_side_worker, settings, ends, str(copy),
                                            min_age, gc_on)))
                shutil.rmtree(copy, ignore_errors=True)
            runs[name] = sides
            load.append(_loadavg())
    finally:
        if not folder:
            shutil.rmtree(scratch, ignore_errors=True)
        delete_topic_set(settings)
    result: dict[str, Any] = {
        "store_records": sum(fill_ends.values()),
        "ingested_records": sum(ends.values()) - sum(fill_ends.values()),
        "runs_per_side": GC_RUN_ORDER.count(True), "target_ratio": 0.8,
        "load_average_1m": [round(x[0], 2) for x in load]}
    for name, done in runs.items():
        on = [r for gc_on, r in done if gc_on]
        off = [r for gc_on, r in done if not gc_on]
        on_rate = _total(on, "records") / _total(on, "seconds")
        off_rate = _total(off, "records") / _total(off, "seconds")
        result[name] = {
            "tx_per_s_gc": round(on_rate), "tx_per_s_no_gc": round(off_rate),
            "ratio": round(on_rate / off_rate, 3),
            "runs_tx_per_s": [[gc_on, round(r["records"] / r["seconds"])] for gc_on, r in done],
            "cpu_us_per_record_gc": round(1e6 * _total(on, "cpu") / _total(on, "records"), 2),
            "cpu_us_per_record_no_gc": round(1e6 * _total(off, "cpu") / _total(off, "records"), 2),
            "gc_released_during_ingest": round(_total(on, "gc_released_during_ingest") / len(on)),
            "gc_release_per_s_ingest_idle": round(_total(on, "gc_idle_release_per_s") / len(on)),
            "peak_rss_mib": round(max(r["peak_rss_mib"] for _, r in done), 1)}
    result["met"] = all(result[n]["ratio"] >= 0.8 for n in runs)
    return result


def _total(runs: list[dict], key: str) -> float:
    return sum(r[key] for r in runs)


def _loadavg() -> tuple[float, float, float]:
    import os
    return os.getloadavg()
