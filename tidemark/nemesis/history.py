"""The record of one fault-injection run, as the checker reads it.

A :class:`History` is plain data: to and from a JSON-able dict (:meth:`History.to_dict`,
:meth:`History.from_dict`) and to and from JSON lines, one tagged record a line, so that a
harness can append as the run goes (:class:`HistoryLog`) and the checker read the file back
(:func:`read_history`). Txlog partitions are ints (string keys in JSON); offsets are Kafka
offsets; ranges are half-open ``[lo, hi)``; times are wall-clock milliseconds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Range", "Event", "Confirmed", "Handled", "PartitionSample", "Sample", "SendAck",
           "FinalPartition", "Convergence", "Final", "History", "HistoryLog", "read_history",
           "history_from_lines", "normalise"]

Range = tuple[int, int]
"""A half-open range of offsets ``[lo, hi)``."""


def normalise(ranges: Iterable[Iterable[int]]) -> tuple[Range, ...]:
    """Sorted, disjoint, non-empty ranges (adjacent or overlapping ones merged)."""
    out: list[list[int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges):
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def _ranges(raw: Any) -> tuple[Range, ...]:
    return tuple((int(a), int(b)) for a, b in raw)


def _opt_int(raw: Any) -> int | None:
    return None if raw is None else int(raw)


@dataclass(frozen=True)
class Event:
    """A nemesis event: ``kind`` is e.g. ``partition``, ``heal``, ``isolate``, ``loss``,
    ``clock-skew``, ``kill``, ``seed`` (``detail["seed"]``)."""

    t_ms: int
    kind: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"t_ms": self.t_ms, "kind": self.kind, "detail": dict(self.detail)}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Event:
        """Inverse of :meth:`to_dict`."""
        return Event(int(d["t_ms"]), str(d["kind"]), dict(d.get("detail") or {}))


@dataclass(frozen=True)
class Confirmed:
    """A send its sender saw confirmed, with the sender's sequence number."""

    message_id: str
    seq: int


@dataclass(frozen=True)
class Handled:
    """One handler call of a recipient: which incarnation handled which message."""

    incarnation: str
    message_id: str
    sender: str
    seq: int


@dataclass(frozen=True)
class PartitionSample:
    """What one node reported for one txlog partition it owns at one time."""

    held: tuple[Range, ...]
    cut: int | None = None
    #: a released prefix: everything below it is released (None: the system claims none)
    gc_point: int | None = None
    #: where the node's holdings start (its interval map's floor) when it is not the GC
    #: point: a system that releases records one by one below a GC point (Tidemark's
    #: replicas keep unacked Sends there) reports the floor here and no ``gc_point``
    floor: int | None = None

    @property
    def start(self) -> int:
        """Where the holdings are judged from: the floor, else the GC point, else 0."""
        return self.floor if self.floor is not None else (self.gc_point or 0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"held": [list(r) for r in self.held], "cut": self.cut, "gc_point": self.gc_point,
                "floor": self.floor}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> PartitionSample:
        """Inverse of :meth:`to_dict`."""
        return PartitionSample(_ranges(d.get("held") or ()), _opt_int(d.get("cut")),
                               _opt_int(d.get("gc_point")), _opt_int(d.get("floor")))


@dataclass(frozen=True)
class Sample:
    """One node's state at ``t_ms``: per owned txlog partition, held offsets, cut, GC point."""

    t_ms: int
    node: str
    partitions: Mapping[int, PartitionSample]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"t_ms": self.t_ms, "node": self.node,
                "partitions": {str(p): s.to_dict() for p, s in sorted(self.partitions.items())}}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Sample:
        """Inverse of :meth:`to_dict`."""
        return Sample(int(d["t_ms"]), str(d["node"]),
                      {int(p): PartitionSample.from_dict(s)
                       for p, s in (d.get("partitions") or {}).items()})


@dataclass(frozen=True)
class SendAck:
    """A Send at ``offset`` of a txlog partition: its message id, the offset of the record
    that acked it (None: not acked) and when it became acked and stable, if known."""

    offset: int
    message_id: str
    acked_by: int | None = None
    acked_stable_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"offset": self.offset, "message_id": self.message_id, "acked_by": self.acked_by,
                "acked_stable_ms": self.acked_stable_ms}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> SendAck:
        """Inverse of :meth:`to_dict`."""
        return SendAck(int(d["offset"]), str(d["message_id"]), _opt_int(d.get("acked_by")),
                       _opt_int(d.get("acked_stable_ms")))


@dataclass(frozen=True)
class FinalPartition:
    """A node's interval map and digest of one partition after healing."""

    held: tuple[Range, ...]
    digest: str
    #: offsets of recorded Sends the node no longer stores (it released them)
    released: tuple[int, ...] = ()
    #: the node's GC point then (releases must lie below it, their Acks too)
    gc_point: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"held": [list(r) for r in self.held], "digest": self.digest,
                "released": list(self.released), "gc_point": self.gc_point}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> FinalPartition:
        """Inverse of :meth:`to_dict`."""
        return FinalPartition(_ranges(d.get("held") or ()), str(d.get("digest", "")),
                              tuple(int(x) for x in d.get("released") or ()),
                              _opt_int(d.get("gc_point")))


@dataclass(frozen=True)
class Convergence:
    """When a co-replica pair of a partition was healed and when it was seen converged."""

    partition: int
    nodes: tuple[str, str]
    healed_at_ms: int | None = None
    converged_at_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"partition": self.partition, "nodes": list(self.nodes),
                "healed_at_ms": self.healed_at_ms, "converged_at_ms": self.converged_at_ms}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Convergence:
        """Inverse of :meth:`to_dict`."""
        a, b = d["nodes"]
        return Convergence(int(d["partition"]), (str(a), str(b)), _opt_int(d.get("healed_at_ms")),
                           _opt_int(d.get("converged_at_ms")))


@dataclass
class Final:
    """After healing: per node, per partition, its interval map and digest; per co-replica
    pair, when it was healed and seen converged (when known)."""

    nodes: dict[str, dict[int, FinalPartition]] = field(default_factory=dict)
    pairs: list[Convergence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"nodes": {n: {str(p): f.to_dict() for p, f in ps.items()}
                          for n, ps in self.nodes.items()},
                "pairs": [c.to_dict() for c in self.pairs]}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Final:
        """Inverse of :meth:`to_dict`."""
        return Final({str(n): {int(p): FinalPartition.from_dict(f) for p, f in ps.items()}
                      for n, ps in (d.get("nodes") or {}).items()},
                     [Convergence.from_dict(c) for c in d.get("pairs") or ()])


@dataclass
class History:
    """One run. See docs/partitions.md, "The checker", for each field's meaning."""

    events: list[Event] = field(default_factory=list)
    confirmed: dict[str, list[Confirmed]] = field(default_factory=dict)   # sender -> send order
    handled: dict[str, list[Handled]] = field(default_factory=dict)   # recipient -> handling order
    dedup: dict[str, bool] = field(default_factory=dict)          # recipient -> persisted dedup on
    redeliverable: set[str] = field(default_factory=set)
    #: ids the persisted dedup store's one window may run again: each killed incarnation's
    #: last handled id per sender (a kill between the handler's return and the store's put)
    dedup_window: set[str] = field(default_factory=set)
    samples: list[Sample] = field(default_factory=list)
    owners: dict[int, list[str]] = field(default_factory=dict)    # partition -> owning nodes
    acks: dict[int, list[SendAck]] = field(default_factory=dict)  # partition -> Sends
    final: Final = field(default_factory=Final)

    @property
    def seed(self) -> int | None:
        """The seed a seeded run logged (its first ``seed`` event), else None."""
        for e in self.events:
            if e.kind == "seed" and "seed" in e.detail:
                return int(e.detail["seed"])
        return None

    # ---- dict form -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (string keys, lists; the redeliverable ids sorted)."""
        return {
            "events": [e.to_dict() for e in self.events],
            "confirmed": {s: [[c.message_id, c.seq] for c in cs]
                          for s, cs in self.confirmed.items()},
            "handled": {r: [[h.incarnation, h.message_id, h.sender, h.seq] for h in hs]
                        for r, hs in self.handled.items()},
            "dedup": dict(self.dedup),
            "redeliverable": sorted(self.redeliverable),
            "dedup_window": sorted(self.dedup_window),
            "samples": [s.to_dict() for s in self.samples],
            "owners": {str(p): list(ns) for p, ns in self.owners.items()},
            "acks": {str(p): [a.to_dict() for a in xs] for p, xs in self.acks.items()},
            "final": self.final.to_dict(),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> History:
        """Inverse of :meth:`to_dict`; missing fields are empty."""
        return History(
            events=[Event.from_dict(e) for e in d.get("events") or ()],
            confirmed={str(s): [Confirmed(str(m), int(q)) for m, q in cs]
                       for s, cs in (d.get("confirmed") or {}).items()},
            handled={str(r): [Handled(str(i), str(m), str(s), int(q)) for i, m, s, q in hs]
                     for r, hs in (d.get("handled") or {}).items()},
            dedup={str(r): bool(v) for r, v in (d.get("dedup") or {}).items()},
            redeliverable={str(m) for m in d.get("redeliverable") or ()},
            dedup_window={str(m) for m in d.get("dedup_window") or ()},
            samples=[Sample.from_dict(s) for s in d.get("samples") or ()],
            owners={int(p): [str(n) for n in ns] for p, ns in (d.get("owners") or {}).items()},
            acks={int(p): [SendAck.from_dict(a) for a in xs]
                  for p, xs in (d.get("acks") or {}).items()},
            final=Final.from_dict(d.get("final") or {}),
        )

    # ---- JSON lines ------------------------------------------------------------------------

    def records(self) -> Iterator[dict[str, Any]]:
        """The history as the tagged records :class:`HistoryLog` writes, one per line."""
        for e in self.events:
            yield {"type": "event", **e.to_dict()}
        for p, ns in self.owners.items():
            yield {"type": "owners", "partition": p, "nodes": list(ns)}
        for r, on in self.dedup.items():
            yield {"type": "dedup", "recipient": r, "on": on}
        for sender, cs in self.confirmed.items():
            for c in cs:
                yield {"type": "confirmed", "sender": sender, "message_id": c.message_id,
                       "seq": c.seq}
        for r, hs in self.handled.items():
            for h in hs:
                yield {"type": "handled", "recipient": r, "incarnation": h.incarnation,
                       "message_id": h.message_id, "sender": h.sender, "seq": h.seq}
        for m in sorted(self.redeliverable):
            yield {"type": "redeliverable", "message_id": m}
        for m in sorted(self.dedup_window):
            yield {"type": "dedup_window", "message_id": m}
        for s in self.samples:
            yield {"type": "sample", **s.to_dict()}
        for p, xs in self.acks.items():
            for a in xs:
                yield {"type": "send", "partition": p, **a.to_dict()}
        for n, ps in self.final.nodes.items():
            yield {"type": "final", "node": n,
                   "partitions": {str(p): f.to_dict() for p, f in ps.items()}}
        for pair in self.final.pairs:
            yield {"type": "convergence", **pair.to_dict()}

    def to_lines(self) -> list[str]:
        """One compact JSON document per record."""
        return [json.dumps(r, separators=(",", ":"), sort_keys=True) for r in self.records()]

    def add(self, rec: Mapping[str, Any]) -> None:
        """Apply one tagged record (a line of the JSON lines form). A ``send`` record for a
        (partition, offset) already known replaces it (a harness appends it again once acked);
        a ``final`` record replaces that node's final state; the rest accumulate."""
        kind = rec.get("type")
        if kind == "event":
            self.events.append(Event.from_dict(rec))
        elif kind == "owners":
            self.owners[int(rec["partition"])] = [str(n) for n in rec["nodes"]]
        elif kind == "dedup":
            self.dedup[str(rec["recipient"])] = bool(rec["on"])
        elif kind == "confirmed":
            self.confirmed.setdefault(str(rec["sender"]), []).append(
                Confirmed(str(rec["message_id"]), int(rec["seq"])))
        elif kind == "handled":
            self.handled.setdefault(str(rec["recipient"]), []).append(
                Handled(str(rec["incarnation"]), str(rec["message_id"]), str(rec["sender"]),
                        int(rec["seq"])))
        elif kind == "redeliverable":
            self.redeliverable.add(str(rec["message_id"]))
        elif kind == "dedup_window":
            self.dedup_window.add(str(rec["message_id"]))
        elif kind == "sample":
            self.samples.append(Sample.from_dict(rec))
        elif kind == "send":
            a = SendAck.from_dict(rec)
            xs = self.acks.setdefault(int(rec["partition"]), [])
            for i, old in enumerate(xs):
                if old.offset == a.offset:
                    xs[i] = a
                    break
            else:
                xs.append(a)
        elif kind == "final":
            self.final.nodes[str(rec["node"])] = {int(p): FinalPartition.from_dict(f)
                                            for p, f in (rec.get("partitions") or {}).items()}
        elif kind == "convergence":
            self.final.pairs.append(Convergence.from_dict(rec))
        else:
            raise ValueError(f"unknown history record type {kind!r}")


def history_from_lines(lines: Iterable[str]) -> History:
    """A history from JSON lines (blank lines skipped)."""
    h = History()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"history line {n} is not JSON: {e}") from e
        h.add(rec)
    return h


def read_history(path: str | Path) -> History:
    """Read a JSON lines history file (what :class:`HistoryLog` wrote)."""
    with open(path, encoding="utf-8") as f:
        return history_from_lines(f)


class HistoryLog:
    """Appends a run's records to a JSON lines file as they happen (thread-safe; each line
    flushed, so a harness killed mid-run leaves a readable prefix)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def write(self, rec: Mapping[str, Any]) -> None:
        """Append one tagged record."""
        line = json.dumps(dict(rec), separators=(",", ":"), sort_keys=True)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def write_history(self, h: History) -> None:
        """Append every record of ``h``."""
        for rec in h.records():
            self.write(rec)

    def event(self, t_ms: int, kind: str, **detail: Any) -> None:
        """A nemesis event (``kind="seed", seed=n`` for a seeded run)."""
        self.write({"type": "event", "t_ms": t_ms, "kind": kind, "detail": detail})

    def owners(self, partition: int, nodes: Iterable[str]) -> None:
        """The nodes that own a txlog partition."""
        self.write({"type": "owners", "partition": partition, "nodes": list(nodes)})

    def dedup(self, recipient: str, on: bool) -> None:
        """Whether a recipient's persisted dedup store is on."""
        self.write({"type": "dedup", "recipient": recipient, "on": on})

    def confirmed(self, sender: str, message_id: str, seq: int) -> None:
        """A send the sender saw confirmed."""
        self.write({"type": "confirmed", "sender": sender, "message_id": message_id,
                    "seq": seq})

    def handled(self, recipient: str, incarnation: str, message_id: str, sender: str,
                seq: int) -> None:
        """A handler call."""
        self.write({"type": "handled", "recipient": recipient, "incarnation": incarnation,
                    "message_id": message_id, "sender": sender, "seq": seq})

    def redeliverable(self, message_id: str) -> None:
        """An id a dying incarnation handled before its ack was appended (dedup off)."""
        self.write({"type": "redeliverable", "message_id": message_id})

    def sample(self, s: Sample) -> None:
        """One node's state at one time."""
        self.write({"type": "sample", **s.to_dict()})

    def send(self, partition: int, a: SendAck) -> None:
        """A Send and what is known of its ack (appending it again replaces it)."""
        self.write({"type": "send", "partition": partition, **a.to_dict()})

    def final(self, node: str, partitions: Mapping[int, FinalPartition]) -> None:
        """A node's state after healing."""
        self.write({"type": "final", "node": node,
                    "partitions": {str(p): f.to_dict() for p, f in partitions.items()}})

    def convergence(self, c: Convergence) -> None:
        """When a co-replica pair was healed and seen converged."""
        self.write({"type": "convergence", **c.to_dict()})
