"""Cluster config epochs, kept in the single-partition ``config`` topic.

Every node reads the topic to its end (a strongly consistent read: the log is
linearizable) and folds it: the first valid genesis (``prev_epoch`` null) starts the chain,
and for each epoch the first valid successor (``prev_epoch`` = that epoch, ``epoch`` =
``prev_epoch + 1``) wins; later competing successors are ignored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import TopicPartition

from tidemark.log import clock
from tidemark.log.consumer import LogConsumer
from tidemark.log.exceptions import CodecError
from tidemark.log.offsets import end_offsets
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings

__all__ = ["Partition", "Epoch", "validate", "fold", "ConfigLog", "append_epoch", "TOPICS"]

#: Topics the stable cut and GC point cover. ``queues`` is compacted and may be rebuilt from
#: scratch by a node (see docs/replica.md), so its maps are shown but not part of the cut.
TOPICS = ("txlog",)


@dataclass(frozen=True)
class Partition:
    """A replica partition: owned log partitions, counting replicas, joining replicas."""

    name: str
    log_partitions: tuple[int, ...]
    replicas: tuple[str, ...]
    joining: tuple[str, ...] = ()


@dataclass(frozen=True)
class Epoch:
    """One ClusterConfig."""

    epoch: int
    prev_epoch: int | None
    log_partitions: int
    nodes: dict[str, str]
    partitions: tuple[Partition, ...]
    created_ms: int = field(default_factory=lambda: clock.now_ms())
    reason: str = ""

    def partition_of(self, node_id: str) -> Partition | None:
        """The replica partition a node belongs to (counting or joining)."""
        for p in self.partitions:
            if node_id in p.replicas or node_id in p.joining:
                return p
        return None

    def owners(self) -> dict[str, list[str]]:
        """``{tp: counting replicas}`` for every txlog partition."""
        return {f"{t}/{k}": list(p.replicas) for p in self.partitions
                for k in p.log_partitions for t in TOPICS}

    def holders(self) -> dict[str, list[str]]:
        """``{tp: counting and joining replicas}``."""
        return {f"{t}/{k}": list(p.replicas) + list(p.joining) for p in self.partitions
                for k in p.log_partitions for t in TOPICS}

    def successor(self, **changes: Any) -> "Epoch":
        """A candidate next epoch."""
        return replace(self, epoch=self.epoch + 1, prev_epoch=self.epoch,
                       created_ms=clock.now_ms(), **changes)

    def to_record(self) -> dict[str, Any]:
        """The ClusterConfig Avro record."""
        return {"epoch": self.epoch, "prev_epoch": self.prev_epoch,
                "log_partitions": self.log_partitions,
                "nodes": [{"node_id": n, "address": a} for n, a in sorted(self.nodes.items())],
                "partitions": [{"name": p.name, "log_partitions": list(p.log_partitions),
                                "replicas": list(p.replicas), "joining": list(p.joining)}
                               for p in self.partitions],
                "created_ms": self.created_ms, "reason": self.reason}

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> "Epoch":
        """Inverse of :meth:`to_record`."""
        return cls(rec["epoch"], rec["prev_epoch"], rec["log_partitions"],
                   {n["node_id"]: n["address"] for n in rec["nodes"]},
                   tuple(Partition(p["name"], tuple(p["log_partitions"]), tuple(p["replicas"]),
                                   tuple(p.get("joining", []))) for p in rec["partitions"]),
                   rec["created_ms"], rec.get("reason", ""))


def validate(epoch: Epoch) -> str | None:
    """Why ``epoch`` is structurally invalid, or None."""
    seen: set[str] = set()
    logs: list[int] = []
    for p in epoch.partitions:
        if not p.replicas:
            return f"partition {p.name} has no counting replica"
        for n in p.replicas + p.joining:
            if n not in epoch.nodes:
                return f"node {n} of partition {p.name} has no address"
            if n in seen:
                return f"node {n} appears twice"
            seen.add(n)
        logs += p.log_partitions
    if sorted(logs) != list(range(epoch.log_partitions)):
        return "log partitions are not covered exactly once"
    return None


def fold(current: Epoch | None, candidates: Iterable[Epoch]) -> Epoch | None:
    """Apply candidates in log order: first valid successor of each epoch wins."""
    for cand in candidates:
        if validate(cand) is not None:
            continue
        if current is None:
            if cand.prev_epoch is None:
                current = cand
        elif (cand.prev_epoch == current.epoch and cand.epoch == current.epoch + 1
              and cand.log_partitions == current.log_partitions):
            current = cand
    return current


class ConfigLog:
    """Follows the ``config`` topic and keeps the current epoch."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.consumer = LogConsumer(settings)
        self.consumer.assign({("config", 0): -2})
        self.current: Epoch | None = None
        self.history: list[Epoch] = []

    def _feed(self, msgs: list) -> None:
        cands = []
        for msg in msgs:
            try:
                dec = self.consumer.decode(msg)
            except CodecError:
                continue
            if dec.name == "ClusterConfig":
                cands.append(Epoch.from_record(dec.record))
        for cand in cands:  # one at a time: every epoch that wins is kept in history
            before = self.current
            self.current = fold(self.current, [cand])
            if self.current is not before and self.current is not None:
                self.history.append(self.current)

    def read_to_end(self, timeout: float = 30.0) -> Epoch | None:
        """Strongly consistent read: consume until the high watermark seen now."""
        tp = TopicPartition(self.settings.topic("config"), 0)
        high = end_offsets(self.settings, "config", [0])[0]  # retries a broker loss
        deadline = time.monotonic() + timeout
        while True:
            pos = self.consumer.raw.position([tp])[0].offset
            if high <= 0 or pos >= high:
                return self.current
            if time.monotonic() > deadline:
                raise TimeoutError(f"config topic not read to offset {high} in {timeout}s")
            self._feed(self.consumer.consume_batch(1000, 0.5))

    def poll(self) -> Epoch | None:
        """Apply whatever new epochs arrived, without blocking."""
        self._feed(self.consumer.consume_batch(100, 0))
        return self.current

    def close(self) -> None:
        """Close the consumer."""
        self.consumer.close()


def append_epoch(settings: Settings, epoch: Epoch) -> None:
    """Append a candidate epoch (whether it wins is decided by :func:`fold`)."""
    problem = validate(epoch)
    if problem:
        from tidemark.gossip.exceptions import EpochError
        raise EpochError(f"epoch {epoch.epoch} is invalid: {problem}")
    producer = LogProducer(settings)
    producer.produce("config", str(epoch.epoch), "ClusterConfig", epoch.to_record(), partition=0)
    producer.flush()
