"""Read the materialized queues: the compacted view of ``queues`` plus per-partition progress.

``queues`` holds QueueEntry upserts (key = peer NUL message id), tombstones (same key, null
value) and QueueProgress records (key ``__progress__.<k>``). Reading every partition from its
start to its current end and keeping the last value per key gives the same view compaction
will eventually leave behind, whether or not the cleaner has run yet.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tidemark.log.consumer import LogConsumer, read_to_end
from tidemark.log.exceptions import CodecError, LogError
from tidemark.log.offsets import end_offsets, watermarks
from tidemark.log.queue_state import is_progress_key, split_queue_key
from tidemark.log.settings import Settings
from tidemark.log.wire import default_codec
from tidemark.spark_streaming.exceptions import QueuesError

__all__ = ["QueuesView", "read_queues", "ProgressTracker", "wait_for_progress", "depth_report"]


@dataclass
class QueuesView:
    """Unacked message ids per peer, and ``next_offset`` per txlog partition."""

    queues: dict[str, set[str]] = field(default_factory=dict)
    progress: dict[int, int] = field(default_factory=dict)
    records: int = 0

    @property
    def total(self) -> int:
        """Number of unacked messages over every peer."""
        return sum(len(ids) for ids in self.queues.values())

    def covers(self, ends: dict[int, int]) -> bool:
        """Whether progress reached ``ends`` (txlog end offsets) on every partition."""
        return all(self.progress.get(p, 0) >= end for p, end in ends.items())


def read_queues(settings: Settings, partitions: list[int] | None = None,
                timeout_s: float = 120.0) -> QueuesView:
    """Read ``queues`` (all partitions, or the given ones) from start to current end."""
    view = QueuesView()
    present: dict[str, bool] = {}
    codec = default_codec()
    try:
        for msgs in read_to_end(settings, "queues", partitions, timeout_s):
            for msg in msgs:
                view.records += 1
                key = (msg.key() or b"").decode("utf-8", "replace")
                if not is_progress_key(key):
                    present[key] = msg.value() is not None
                elif msg.value() is not None:
                    try:
                        rec = codec.decode(msg.value()).record
                    except CodecError:
                        continue
                    part = rec["txlog_partition"]
                    view.progress[part] = max(view.progress.get(part, 0), rec["next_offset"])
    except LogError as exc:
        raise QueuesError(str(exc)) from None
    for key, here in present.items():
        if here:
            try:
                peer, message_id = split_queue_key(key)
            except ValueError:
                continue
            view.queues.setdefault(peer, set()).add(message_id)
    return view


class ProgressTracker:
    """Follows ``queues`` from its start and keeps the highest progress per txlog partition.

    Incremental: each :meth:`poll` reads only what was appended since the last one, and
    decodes only progress records, so waiting on progress stays cheap as queues grows.
    """

    def __init__(self, settings: Settings) -> None:
        self.progress: dict[int, int] = {}
        self._codec = default_codec()
        self._consumer = LogConsumer(settings)
        parts = watermarks(settings, "queues")
        self._consumer.assign({("queues", p): lo for p, (lo, _) in parts.items()})

    def poll(self, timeout_s: float = 0.2) -> dict[int, int]:
        """Read what is new; returns ``{txlog partition: next_offset}``."""
        for msg in self._consumer.consume_batch(50000, timeout_s):
            key = msg.key()
            if key and key.startswith(b"__progress__.") and msg.value() is not None:
                try:
                    rec = self._codec.decode(msg.value()).record
                except CodecError:
                    continue
                part = rec["txlog_partition"]
                self.progress[part] = max(self.progress.get(part, 0), rec["next_offset"])
        return self.progress

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()


def wait_for_progress(settings: Settings, timeout_s: float,
                      ends: dict[int, int] | None = None) -> dict[int, int]:
    """Wait until queues progress covers ``ends`` (default: txlog's end offsets now)."""
    ends = {p: e for p, e in (ends or end_offsets(settings, "txlog")).items() if e > 0}
    deadline = time.monotonic() + timeout_s
    tracker = ProgressTracker(settings)
    try:
        while True:
            progress = tracker.poll()
            if all(progress.get(p, 0) >= e for p, e in ends.items()):
                return dict(progress)
            if time.monotonic() > deadline:
                behind = {p: (progress.get(p, 0), e) for p, e in ends.items()
                          if progress.get(p, 0) < e}
                raise QueuesError(f"queues progress did not reach txlog's end within"
                                  f" {timeout_s}s (partition: (progress, end) = {behind})")
    finally:
        tracker.close()


def depth_report(settings: Settings, peer: str | None = None) -> dict:
    """The documented JSON shape: ``{"progress": {"0": o}, "peers": {p: n}, "total": T}``."""
    partitions = None
    if peer is not None:
        from tidemark.log.partitioner import partition_for_peer
        count = len(watermarks(settings, "txlog"))
        partitions = [partition_for_peer(peer, count)]
    view = read_queues(settings, partitions)
    peers = {p: len(ids) for p, ids in sorted(view.queues.items()) if peer is None or p == peer}
    if peer is not None:
        peers.setdefault(peer, 0)
    return {"progress": {str(p): o for p, o in sorted(view.progress.items())},
            "peers": peers, "total": sum(peers.values())}
