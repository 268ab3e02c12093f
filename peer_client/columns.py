"""A replayed chunk as columns: the lean replay path's unit.

A replay delivers a queue in chunks of a few thousand messages. The general path turns each
row into an :class:`~tidemark.peer_client.records.Envelope` and decides it on its own; the lean
path keeps a chunk as parallel lists (:class:`Columns`) and handles it with a few bulk
operations: one dedup call, one payload decode loop, one handler call per sender's stretch,
one ack call. An Envelope is built only where a message is looked at on its own (a failure,
a handler's context): :class:`ColumnEnvelopes` is a sequence that builds them on demand.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from tidemark.peer_client.records import Envelope

__all__ = ["Columns", "ColumnEnvelopes", "sender_runs"]


@dataclass(slots=True)
class Columns:
    """One replayed chunk of one txlog partition, field by field (same length each, txlog
    order). Every message is persistent, replayed, and of ``environment``."""

    partition: int
    environment: str
    offsets: list[int]
    ids: list[str]
    senders: list[str]
    types: list[str]
    payloads: list[bytes]
    timestamps: list[int]
    counts: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    def envelope(self, i: int) -> Envelope:
        """The Envelope of message ``i`` (what the general path would have built)."""
        return Envelope(self.ids[i], self.senders[i], self.types[i], self.payloads[i],
                        self.timestamps[i], True, self.environment, self.counts[i], True,
                        self.partition, self.offsets[i])

    def slice(self, start: int, stop: int) -> "Columns":
        """Messages ``start`` to ``stop`` (exclusive) as a chunk of their own."""
        return Columns(self.partition, self.environment, self.offsets[start:stop],
                       self.ids[start:stop], self.senders[start:stop], self.types[start:stop],
                       self.payloads[start:stop], self.timestamps[start:stop],
                       self.counts[start:stop])

    def envelopes(self) -> list[Envelope]:
        """Every message's Envelope, in order (the general path's input)."""
        return [self.envelope(i) for i in range(len(self.ids))]


class ColumnEnvelopes(Sequence[Envelope]):
    """The Envelopes of some messages of a :class:`Columns` (by position), built when read."""

    __slots__ = ("cols", "positions")

    def __init__(self, cols: Columns, positions: Sequence[int]) -> None:
        self.cols, self.positions = cols, positions

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, index: int) -> Envelope: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Envelope]: ...

    def __getitem__(self, index: int | slice) -> Envelope | Sequence[Envelope]:
        if isinstance(index, slice):
            return ColumnEnvelopes(self.cols, self.positions[index])
        return self.cols.envelope(self.positions[index])

    def __iter__(self) -> Iterator[Envelope]:
        envelope = self.cols.envelope
        return (envelope(i) for i in self.positions)


def sender_runs(senders: Sequence[str], positions: Sequence[int]) -> dict[str, list[int]]:
    """``positions`` grouped by sender, each group in order (a sender's messages run in
    order on its own lane; different senders may run side by side)."""
    if not positions:
        return {}
    first = senders[positions[0]]
    if (senders.count(first) == len(senders) if len(positions) == len(senders)
            else all(senders[i] == first for i in positions)):
        return {first: list(positions)}
    runs: dict[str, list[int]] = {}
    for i in positions:
        run = runs.get(senders[i])
        if run is None:
            runs[senders[i]] = [i]
        else:
            run.append(i)
    return runs
