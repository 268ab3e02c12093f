"""The queue model run in memory: txlog records in, per-peer queues and dead letters out.

:mod:`tidemark.log.queue_state` decides what a batch of one peer's records does to its
queue and :mod:`tidemark.log.queue_expiry` what expires; the Spark job keeps that state in
Spark's MapStates. :class:`QueueFold` keeps it in dicts and applies the same two functions, so
the test double (:class:`tidemark.peer_client.testing.TestBus`) and the tests' oracle queue,
count deliveries, dead-letter and forget exactly as the job does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.log.queue_expiry import expiry_chunks, plan_expiry
from tidemark.log.queue_state import (
    ACK,
    ACK_BATCH,
    FAIL,
    PURGE,
    SEND,
    Chunk,
    Entry,
    Event,
    Letter,
    PeerMeta,
    Ttl,
    plan_events,
)

__all__ = ["QueueFold", "PeerQueue", "events_of"]


def events_of(name: str, record: Mapping[str, Any], offset: int) -> list[Event]:
    """The queue events of one decoded txlog record (an AckBatch is the Acks of its ids;
    other kinds, e.g. a PeerDescriptor, have none)."""
    ts = int(record.get("timestamp_ms", 0))
    if name == ACK_BATCH:
        return [Event(ACK, offset, ts, mid) for mid in record.get("message_ids", ())]
    if name in (SEND, ACK, FAIL):
        return [Event(name, offset, ts, str(record.get("message_id", "")), record)]
    if name == PURGE:  # at the txlog offset it reaches (a Purge of the purges topic)
        below = int(record.get("below_offset", -1))
        return [Event(PURGE, below if below >= 0 else offset, ts, "", record)]
    return []


@dataclass
class PeerQueue:
    """One peer's state: its meta, its entries by message id and its expiry chunks."""

    meta: PeerMeta = field(default_factory=PeerMeta)
    entries: dict[str, Entry] = field(default_factory=dict)
    chunks: dict[tuple[int, int], Chunk] = field(default_factory=dict)
    #: the Send that queued each queued id
    sends: dict[str, Event] = field(default_factory=dict)
    letters: list[Letter] = field(default_factory=list)

    def queued(self) -> list[tuple[str, Entry]]:
        """``(message id, entry)`` of the queued messages, in txlog order."""
        return sorted(((m, e) for m, e in self.entries.items() if e.queued),
                      key=lambda item: item[1].offset)


class QueueFold:
    """Per-peer queues folded from txlog records with the queues job's own decisions."""

    def __init__(self, ttl: Ttl | None = None) -> None:
        self.ttl = ttl or Ttl()
        self.peers: dict[str, PeerQueue] = {}

    def apply(self, peer: str, events: Iterable[Event]) -> list[Letter]:
        """Apply one batch of ``peer``'s events (txlog order); returns its dead letters."""
        state = self.peers.setdefault(peer, PeerQueue())
        batch = list(events)
        if not batch:
            return []
        plan = plan_events(state.meta, state.entries, batch, self.ttl)
        for mid, entry in plan.writes.items():
            if entry is None:
                state.entries.pop(mid, None)
            else:
                state.entries[mid] = entry
        letters: list[Letter] = []
        for change in plan.changes:
            if change.send is not None:
                state.sends[change.message_id] = change.send
            elif not change.upsert:
                state.sends.pop(change.message_id, None)
            letters.extend(change.letters)
        for cls, seq, chunk in plan.chunks:
            state.chunks[(cls, seq)] = chunk
        state.meta = plan.meta
        due = {key: state.chunks[key] for key in expiry_chunks(state.meta)
               if key in state.chunks}
        gone = plan_expiry(state.meta, due, state.entries)
        for mid in gone.deletes:
            state.entries.pop(mid, None)
        for key in gone.chunk_deletes:
            state.chunks.pop(key, None)
        state.meta = gone.meta
        state.letters.extend(letters)
        return letters

    def apply_record(self, peer: str, name: str, record: Mapping[str, Any],
                     offset: int) -> list[Letter]:
        """Apply one decoded txlog record of ``peer``."""
        return self.apply(peer, events_of(name, record, offset))

    def queue(self, peer: str) -> list[tuple[Event, Entry]]:
        """``peer``'s queued messages in txlog order: the Send that queued each, its entry."""
        state = self.peers.get(peer)
        if state is None:
            return []
        return [(state.sends[mid], entry) for mid, entry in state.queued()]

    def letters(self, peer: str) -> list[Letter]:
        """``peer``'s dead letters so far, in the order they were produced."""
        state = self.peers.get(peer)
        return list(state.letters) if state is not None else []
