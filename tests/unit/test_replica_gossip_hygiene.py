"""Costs that grew with time (issue 11 item 8): the loss ledger in every gossiped NodeState,
epochs of a config read batch the ConfigLog forgot, and a blocking broker call on every
txlog offset jump."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confluent_kafka import Message

from tidemark.gossip.cluster_config import ConfigLog, Epoch, Partition
from tidemark.gossip.node_state import NodeState, PartitionRanges
from tidemark.log.settings import load_settings
from tidemark.log.wire import default_codec
from tidemark.replica.ingest import Ingestor
from tidemark.replica.status import StatusSnapshot, build_status
from tidemark.replica.store import Store

OFFLINE = load_settings(env={}, bootstrap="127.0.0.1:1", topic_prefix="hy.", partitions=2)


def _ledger(store: Store, n: int) -> None:
    batch = store.batch()
    for i in range(n):
        batch.put(b"L" + (i + 1).to_bytes(8, "big"), json.dumps(
            {"topic": "txlog", "partition": 0, "start": 10 * i, "end": 10 * i + 5, "epoch": 1,
             "node": "n1", "detected_ms": 1000 + i}).encode())
    batch.commit()


def test_gossiped_losses_are_bounded(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    _ledger(store, 1000)
    raw = store.gossip_losses(limit=32)
    state = NodeState("n1", 1, 1, True, losses=raw)
    assert len(state.encode()) < 8_000  # ~140 KB with the whole ledger
    entries = [json.loads(r) for r in raw]
    summary = [e for e in entries if "summary" in e]
    assert summary == [{"summary": True, "node": "n1", "entries": 1000, "offsets": 5000}]
    shown = [e for e in entries if "summary" not in e]
    assert len(shown) == 32 and shown[-1]["detected_ms"] == 1999  # the newest ones
    _ledger(store, 1001)  # one more entry: the cached summary follows
    assert json.loads(store.gossip_losses(limit=32)[-1])["entries"] == 1001
    epoch = Epoch(1, None, 2, {"n1": "a:1"}, (Partition("p0", (0, 1), ("n1",)),))
    doc = build_status(StatusSnapshot("n1", epoch, {"n1": state}, {}, 3.0, {}, 0, {}, {},
                                      None, []))
    assert len(doc["loss_ledger"]) == 32
    assert doc["loss_summary"] == {"n1": {"entries": 1000, "offsets": 5000}}
    store.close()


def _epoch_msg(epoch: Epoch) -> Message:
    return Message(topic="hy.config", partition=0, offset=epoch.epoch - 1,
                   value=default_codec().encode("ClusterConfig", epoch.to_record()))


def test_config_log_keeps_every_epoch_of_a_read_batch() -> None:
    e1 = Epoch(1, None, 2, {"a": "h:1", "b": "h:2"}, (Partition("p0", (0, 1), ("a",)),))
    e2 = e1.successor(partitions=(Partition("p0", (0, 1), ("a",), ("b",)),), reason="add b")
    e3 = e2.successor(partitions=(Partition("p0", (0, 1), ("a", "b")),), reason="b caught up")
    log = ConfigLog(OFFLINE)
    try:
        log._feed([_epoch_msg(e1), _epoch_msg(e2), _epoch_msg(e3)])
    finally:
        log.close()
    assert log.current == e3
    assert log.history == [e1, e2, e3]  # `cluster add-node` looks for e2 here


class _Raw:
    """A consumer stand-in: cached watermarks known, broker queries counted."""

    def __init__(self, low: int) -> None:
        self.low, self.queries = low, 0

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False
                              ) -> tuple[int, int]:
        if not cached:
            self.queries += 1
        return self.low, 10_000


class _Consumer:
    def __init__(self, raw: _Raw) -> None:
        self.raw = raw

    def close(self) -> None:
        pass


def test_offset_jumps_use_the_cached_log_start(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", "n1")
    ingest = Ingestor(OFFLINE, store, "n1")
    ingest.consumer.close()
    raw = _Raw(low=0)
    ingest.consumer = _Consumer(raw)  # type: ignore[assignment]
    for i in range(1000):  # e.g. a transaction marker after every record
        assert ingest._start_after_jump("txlog", 0, 2 * i, 2 * i + 1) == 2 * i  # a hole
    assert raw.queries == 0
    raw.low = 5000  # the log start passed the position: a gap, still without a broker call
    assert ingest._start_after_jump("txlog", 0, 3000, 5000) == 5000
    assert raw.queries == 0
    raw.low = -1  # the broker did not report it: ask it
    assert ingest._start_after_jump("txlog", 0, 6000, 6001) == 6000
    assert raw.queries == 1
    store.close()


class _Marks(_Raw):
    def __init__(self) -> None:
        super().__init__(0)

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False
                              ) -> tuple[int, int]:
        return 0, 200 if tp.topic.endswith("txlog") else 7


def test_caught_up_time_is_not_claimed_past_a_gap(tmp_path: Path) -> None:
    """A replica whose position (200) sits past a gap ([100, 150) missing) is not caught up:
    its base end (100) is what the cut uses, so ust_ms must not rise from it either."""
    store = Store(tmp_path / "s", "n1")
    batch = store.batch()
    batch.advance("txlog", 0, 0, 100)
    batch.advance("txlog", 0, 150, 200)
    batch.advance("queues", 0, 0, 7)
    batch.commit()
    assert store.position("txlog", 0) == 200 and store.map("txlog", 0).base_end == 100
    ingest = Ingestor(OFFLINE, store, "n1")
    ingest.consumer.close()
    ingest.consumer = _Consumer(_Marks())  # type: ignore[assignment]
    ingest.partitions = [0]
    ingest._refresh_high(5_000)
    assert "txlog/0" not in ingest.caught_up_ms  # the position is past the gap, not the base
    assert ingest.caught_up_ms["queues/0"] == 4_000
    batch = store.batch()
    batch.advance("txlog", 0, 100, 150)  # backfilled: the base reaches the high watermark
    batch.commit()
    ingest._refresh_high(6_000)
    assert ingest.caught_up_ms["txlog/0"] == 5_000
    store.close()


def test_a_states_cut_view_is_made_once_and_changes_nothing_else() -> None:
    ranges = (PartitionRanges("txlog", 0, 0, 40, 50, ((45, 48),), 7),
              PartitionRanges("queues", 0, 0, 9, 9))
    state = NodeState("n1", 2, 1000, True, ranges, {"txlog/0": 30})
    twin = NodeState("n1", 2, 1000, True, ranges, {"txlog/0": 30})
    view = state.view()
    assert state.view() is view  # a cut recomputation reads it without rebuilding it
    assert view.base == {"txlog/0": (0, 40), "queues/0": (0, 9)}
    assert view.gc_cut == {"txlog/0": 30} and view.caught_up_ms == {"txlog/0": 7}
    assert view.log_end == {"txlog/0": 50, "queues/0": 9}
    # the cached view is not a field: equality, repr and the wire are as before
    assert state == twin and repr(state) == repr(twin)
    assert state.encode() == twin.encode()
    assert NodeState.decode(state.encode()) == state
