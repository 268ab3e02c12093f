"""Soak: one node ingests ``TIDEMARK_SOAK_RECORDS`` txlog records (default 10M) and its RSS
stays bounded by configuration, not by the size of the store: peak under 512 MiB, and
little growth over the second half of the run. Runs only under ``make soak``.

The node side is the ``bench ingest`` path (the replica Ingestor into a fresh LevelDB store
with the default :class:`tidemark.replica.store.StoreOptions`) in a fresh process, which samples its
own RSS every 500k records.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import generate_load
from tidemark.log.offsets import end_offsets
from tidemark.log.settings import Settings
from tidemark.log.topics import delete_topic_set

pytestmark = [pytest.mark.soak, pytest.mark.timeout(3600)]

RECORDS = int(os.environ.get("TIDEMARK_SOAK_RECORDS", 10_000_000))
PEAK_LIMIT_MIB = 512
GROWTH_LIMIT_MIB = 64
SAMPLE_EVERY = 500_000


def _memory() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    return out


def _ingest_child(settings: Settings, ends: dict[int, int], folder: str, out: Any) -> None:
    """Ingest every record up to ``ends``; put one sample per SAMPLE_EVERY, then the end."""
    from tidemark.replica.ingest import Ingestor
    from tidemark.replica.store import Store
    store = Store(folder, "soak")
    ingest = Ingestor(settings, store, "soak")
    ingest.assign(list(ends))
    started, mark = time.perf_counter(), SAMPLE_EVERY
    while any((store.position("txlog", k) or 0) < e for k, e in ends.items()):
        ingest.step(0.2)
        if ingest.applied >= mark:
            out.put({"records": ingest.applied, **_memory()})
            mark += SAMPLE_EVERY
    seconds = time.perf_counter() - started
    positions = {k: store.position("txlog", k) for k in ends}
    ingest.close()
    store.close()
    out.put({"records": ingest.applied, "seconds": seconds, "positions": positions,
             "done": True, **_memory()})


def test_node_rss_stays_flat_over_a_large_store(fresh_settings: Settings,
                                                tmp_path: Path) -> None:
    settings = fresh_settings
    try:
        generate_load(settings, peers=1000, messages=max(1, int(RECORDS / 1.5)), ack_ratio=0.5)
        ends = end_offsets(settings, "txlog")
        total = sum(ends.values())
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        child = ctx.Process(target=_ingest_child,
                            args=(settings, ends, str(tmp_path / "store"), queue))
        child.start()
        samples: list[dict] = []
        deadline = time.monotonic() + 3000
        while not (samples and samples[-1].get("done")):
            assert child.is_alive() or not queue.empty(), "ingest child died"
            assert time.monotonic() < deadline, f"ingest too slow: {samples[-1:]}"
            try:
                samples.append(queue.get(timeout=5))
            except Exception:  # queue.Empty: keep waiting until the deadline
                continue
        child.join(60)
    finally:
        delete_topic_set(settings)
    end = samples[-1]
    assert end["positions"] == ends, "node did not apply every record"
    half = [s for s in samples[:-1] if s["records"] <= total / 2]
    hwm_half = half[-1]["VmHWM"] if half else 0.0
    growth = end["VmHWM"] - hwm_half
    rss_first = max((s["VmRSS"] for s in half), default=0.0)
    rss_second = max(s["VmRSS"] for s in samples if s["records"] > total / 2)
    print(f"\nsoak: {total} records in {end['seconds']:.1f} s "
          f"({total / end['seconds']:,.0f} tx/s); peak RSS {end['VmHWM']:.0f} MiB; "
          f"peak at half {hwm_half:.0f} MiB; max RSS first half {rss_first:.0f} MiB, "
          f"second half {rss_second:.0f} MiB")
    for s in samples[:-1]:
        print(f"  {s['records']:>10} records: RSS {s['VmRSS']:.0f} MiB (anon "
              f"{s['RssAnon']:.0f}, file {s['RssFile']:.0f}), peak {s['VmHWM']:.0f} MiB")
    assert end["VmHWM"] < PEAK_LIMIT_MIB
    assert growth < GROWTH_LIMIT_MIB, f"peak RSS grew {growth:.0f} MiB over the second half"
    assert rss_second - rss_first < GROWTH_LIMIT_MIB
