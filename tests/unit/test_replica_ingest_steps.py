"""An ingest step's bookkeeping (watermarks, positions over trailing holes) runs at most
every ``BOOKKEEPING_S``, not on each of the hundreds of steps a second a loaded node makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tidemark.replica.ingest as ingest_mod
from tidemark.log.settings import load_settings
from tidemark.replica.ingest import BOOKKEEPING_S, Ingestor
from tidemark.replica.store import Store

OFFLINE = load_settings(env={}, bootstrap="127.0.0.1:1", topic_prefix="st.", partitions=2)


class _Raw:
    """Counts the watermark reads (one per owned topic-partition per refresh) and position
    reads (one call per idle bookkeeping)."""

    def __init__(self) -> None:
        self.watermarks = self.positions = 0

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False
                              ) -> tuple[int, int]:
        self.watermarks += 1
        return 0, 0

    def position(self, tps: list[Any]) -> list[Any]:
        self.positions += 1
        for tp in tps:
            tp.offset = -1001  # no position yet: nothing to move
        return tps


class _Consumer:
    def __init__(self) -> None:
        self.raw = _Raw()

    def consume_ready(self, max_records: int, timeout: float) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def test_bookkeeping_runs_once_per_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    clock = [1000.0]
    monkeypatch.setattr(ingest_mod.time, "monotonic", lambda: clock[0])
    store = Store(tmp_path / "s", "n1")
    ingest = Ingestor(OFFLINE, store, "n1")
    ingest.consumer.close()
    fake = _Consumer()
    ingest.consumer = fake  # type: ignore[assignment]
    ingest.partitions = [0, 1]
    try:
        for _ in range(50):  # fifty empty steps within one interval
            ingest.step(0.001)
        assert (fake.raw.positions, fake.raw.watermarks) == (1, 4)  # 2 partitions x 2 topics
        clock[0] += BOOKKEEPING_S
        ingest.step(0.001)
        assert (fake.raw.positions, fake.raw.watermarks) == (2, 8)
    finally:
        ingest.close()
        store.close()
