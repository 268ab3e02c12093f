"""What a replica node gossips, as a typed object: its interval maps, cuts, pins and losses.

On the wire it is the Avro ``NodeState`` record (single-object encoding); in memory it is a
frozen :class:`NodeState`, from which the stable-cut view and the full interval maps derive.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.gossip.exceptions import GossipError
from tidemark.gossip.interval_map import IntervalMap
from tidemark.gossip.stable_cut import ReplicaView
from tidemark.log.exceptions import CodecError
from tidemark.log.wire import default_codec

__all__ = ["PartitionRanges", "NodeState", "cut_entries", "cut_from_entries"]


def cut_entries(cut: Mapping[str, int]) -> list[dict[str, Any]]:
    """``{"txlog/3": 7}`` -> ``[{"topic": "txlog", "partition": 3, "offset": 7}]``."""
    out = []
    for tp, o in sorted(cut.items()):
        topic, _, k = tp.partition("/")
        out.append({"topic": topic, "partition": int(k), "offset": int(o)})
    return out


def cut_from_entries(entries: list[Mapping[str, Any]]) -> dict[str, int]:
    """Inverse of :func:`cut_entries`."""
    return {f"{e['topic']}/{e['partition']}": int(e["offset"]) for e in entries}


@dataclass(frozen=True)
class PartitionRanges:
    """One (topic, partition) of a node: its interval map, the log end it saw, and since
    when it has been caught up (ms, 0 = not)."""

    topic: str
    partition: int
    base_start: int
    base_end: int
    log_end: int
    detached: tuple[tuple[int, int], ...] = ()
    caught_up_ms: int = 0

    @property
    def tp(self) -> str:
        """``txlog/3``."""
        return f"{self.topic}/{self.partition}"

    def interval_map(self) -> IntervalMap:
        """The full interval map."""
        return IntervalMap(self.base_end, self.base_start, [list(d) for d in self.detached])


@dataclass(frozen=True)
class NodeState:
    """A node's gossiped state (see ``schemas/NodeState.avsc``)."""

    node_id: str
    epoch: int
    timestamp_ms: int
    caught_up: bool
    ranges: tuple[PartitionRanges, ...] = ()
    gc_cut: Mapping[str, int] = field(default_factory=dict)
    pins: Mapping[str, int] = field(default_factory=dict)
    address: str = ""
    ust: Mapping[str, int] = field(default_factory=dict)
    ust_ms: int = 0
    backfill: str = ""
    losses: tuple[str, ...] = ()

    # ---- derived views -----------------------------------------------------------------------
    def view(self) -> ReplicaView:
        """The parts the stable cut and the GC point need. Made once per state (the state is
        frozen, and a node recomputes its cut from the same states up to a hundred times a
        second under load), so callers must not change it."""
        cached = self.__dict__.get("_view")
        if cached is None:
            cached = ReplicaView(self.node_id, self.epoch,
                                 {r.tp: (r.base_start, r.base_end) for r in self.ranges},
                                 dict(self.gc_cut),
                                 {r.tp: r.caught_up_ms for r in self.ranges if r.caught_up_ms},
                                 {r.tp: r.log_end for r in self.ranges})
            object.__setattr__(self, "_view", cached)  # not a field: equality is unchanged
        return cached

    def maps(self) -> dict[str, IntervalMap]:
        """Full interval maps by tp (for backfill and missing-data decisions)."""
        return {r.tp: r.interval_map() for r in self.ranges}

    def loss_entries(self) -> list[dict[str, Any]]:
        """The loss ledger entries this node reported."""
        return [json.loads(raw) for raw in self.losses]

    # ---- wire --------------------------------------------------------------------------------
    def to_record(self) -> dict[str, Any]:
        """The Avro record."""
        return {"node_id": self.node_id, "epoch": self.epoch, "timestamp_ms": self.timestamp_ms,
                "caught_up": self.caught_up,
                "ranges": [{"topic": r.topic, "partition": r.partition,
                            "base_start": r.base_start, "base_end": r.base_end,
                            "detached": [{"start": a, "end": b} for a, b in r.detached],
                            "log_end": r.log_end, "caught_up_ms": r.caught_up_ms}
                           for r in self.ranges],
                "gc_cut": cut_entries(self.gc_cut), "pins": cut_entries(self.pins),
                "address": self.address, "ust": cut_entries(self.ust), "ust_ms": self.ust_ms,
                "backfill": self.backfill, "losses": list(self.losses)}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> "NodeState":
        """From the Avro record."""
        ranges = tuple(PartitionRanges(
            r["topic"], r["partition"], r["base_start"], r["base_end"], r["log_end"],
            tuple((d["start"], d["end"]) for d in r["detached"]), r.get("caught_up_ms", 0))
            for r in rec["ranges"])
        return cls(rec["node_id"], rec["epoch"], rec["timestamp_ms"], rec["caught_up"], ranges,
                   cut_from_entries(rec["gc_cut"]), cut_from_entries(rec.get("pins", [])),
                   rec.get("address", ""), cut_from_entries(rec.get("ust", [])),
                   rec.get("ust_ms", 0), rec.get("backfill", ""), tuple(rec.get("losses", [])))

    def encode(self) -> bytes:
        """Avro single-object bytes."""
        return default_codec().encode("NodeState", self.to_record())

    @classmethod
    def decode(cls, data: bytes) -> "NodeState":
        """Inverse of :meth:`encode`; raises :class:`GossipError` for anything else."""
        try:
            dec = default_codec().decode(data)
        except CodecError as exc:
            raise GossipError(f"undecodable NodeState: {exc}") from None
        if dec.name != "NodeState":
            raise GossipError(f"expected NodeState, got {dec.name}")
        return cls.from_record(dec.record)
