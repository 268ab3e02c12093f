"""Per-message queue state, pure logic (no Spark, no I/O): what a batch of txlog events does.

State is kept **per message**, never per peer as one blob, so a batch costs in proportion to
its rows, not to a down peer's backlog. For each peer there are:

* one :class:`Entry` per message id it knows: *queued* (with the txlog offset of the Send
  that queued it) or *remembered* until a log time (an Ack or Purge of that id);
* one :class:`PeerMeta`: the peer's log clock, its number of queued messages, and two
  expiry FIFOs (one per memory class) whose :class:`Chunk` s list remembered ids in the
  order they expire.

A Send whose id is queued or still remembered is ignored, so an early Ack cancels the later
Send and a duplicate Send counts once:

* an Ack of a message that is not queued (an *early ack*: the direct path beat the log) is
  remembered for ``ack_ttl_ms`` (class :data:`EARLY`);
* an Ack of a queued message, and every message a Purge drops, is remembered only for the
  shorter ``dedup_window_ms`` (class :data:`DEDUP`). Early acks survive a Purge.

**Delivery counts.** A DeliveryFailed record (event kind :data:`FAIL`) of a queued id adds
one to that entry's ``delivery_count``; a failure of an id that was acked, purged or
dead-lettered is ignored. A terminal one (``terminal``: its handler called ``term``)
dead-letters the id at once.

**Early failures.** A failure can reach txlog before its Send, as an ack can: the recipient's
handler failed a direct delivery before the sender appended the Send, which it does after
the receipt. A failure of an id the peer does not know is remembered for ``ack_ttl_ms``
(class :data:`EARLY`) as an *early failure* entry (not queued, ``delivery_count`` failures so
far, the last one's offset, reason and whether any was terminal). It does not block the
Send: when the Send comes, it is queued with those failures counted, or dead-lettered at
once if they reach the limit or one was terminal. An Ack of the id replaces the early
failure with an early ack.
The count is derived from the log only, so a re-run batch counts the same. When it reaches
``Ttl.delivery_limit`` the message leaves the queue and a :class:`Letter` (count, last
reason, the Send's offset) is produced for ``deadletter``; the id is then remembered like an
early ack (for ``ack_ttl_ms``, class :data:`EARLY`), so a duplicate Send of a dead-lettered
(poison) message is dropped rather than silently queued again. An operator's re-send
(``tidemark deadletter replay``) carries a new message id, so it queues once with count 0.

**Time** is the peer's own log time: the clock is the largest ``timestamp_ms`` of any record
of the peer applied so far, and a memory expires once ``clock >= until``. Expiry therefore
depends only on the records, never on wall-clock time or batch boundaries, so a restarted
job converges to the same queues. Every read checks ``until`` against the clock (an expired
memory is as good as absent); entries are *physically* removed by ``plan_expiry``
(:mod:`tidemark.log.queue_expiry`), which pops FIFO chunks once their last id expired
(within one FIFO, ``until`` never decreases, because the clock never does). A remembered id
whose memory was extended sits in a later chunk too; popping the earlier chunk leaves it
alone.

The functions here only decide: :func:`plan_events` returns the net changes of a batch (one
:class:`Change` per message whose presence in the queue differs between the start and the
end of the batch, so each output key appears at most once and a re-run batch writes the same
rows), the entries to write or delete, the chunks to add and the new meta. Reading and writing
the state is the caller's job (:mod:`tidemark.spark_streaming.transform`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["SEND", "ACK", "ACK_BATCH", "PURGE", "FAIL", "DEDUP", "EARLY", "DEFAULT_ACK_TTL_MS",
           "DEFAULT_DEDUP_WINDOW_MS", "DEFAULT_DELIVERY_LIMIT", "Letter", "MAX_ID_BYTES",
           "CHUNK_IDS", "CHUNK_BYTES", "GC_CHUNKS",
           "Event", "Change", "Ttl", "Entry", "Fifo", "PeerMeta", "Chunk", "PeerPlan",
           "plan_events",
           "queue_key", "split_queue_key", "progress_key", "is_progress_key", "purge_key",
           "purge_key_peer"]

SEND, ACK, PURGE, FAIL = "Send", "Ack", "Purge", "DeliveryFailed"
ACK_BATCH = "AckBatch"  # the job applies it as the Acks of its ids (spark_streaming.transform)
#: Memory classes, each with its own expiry FIFO: acked/purged ids, and early acks.
DEDUP, EARLY = 0, 1
#: How long (in the peer's log time) an early ack is remembered: 24 hours.
DEFAULT_ACK_TTL_MS = 24 * 3600 * 1000
#: How long an id acked after its Send, or purged, is remembered against duplicates: 10 min.
DEFAULT_DEDUP_WINDOW_MS = 10 * 60 * 1000
#: Failed deliveries after which a message goes to ``deadletter``.
DEFAULT_DELIVERY_LIMIT = 5
#: Longest peer or message id (UTF-8 bytes) the job keeps in its state; longer is poison.
MAX_ID_BYTES = 1000
#: A FIFO chunk holds at most this many ids and about this many bytes of ids.
CHUNK_IDS, CHUNK_BYTES = 64, 2000
#: At most this many chunks per FIFO are examined per peer and batch.
GC_CHUNKS = 16

_SEP = "\x00"
_PROGRESS_PREFIX = "__progress__."


def queue_key(peer: str, message_id: str) -> str:
    """The ``queues`` key of a queue entry: ``peer``, NUL, ``message_id``."""
    return f"{peer}{_SEP}{message_id}"


def split_queue_key(key: str) -> tuple[str, str]:
    """``(peer, message_id)`` of a queue-entry key (raises ValueError on other keys)."""
    peer, sep, message_id = key.partition(_SEP)
    if not sep or not peer:
        raise ValueError(f"not a queue entry key: {key!r}")
    return peer, message_id


def purge_key(peer: str) -> str:
    """The ``queues`` key of ``peer``'s latest Purge, as the job keeps it there for the
    replicas: NUL, then the peer id (a queue entry key never starts with NUL, a progress key
    neither)."""
    return f"{_SEP}{peer}"


def purge_key_peer(key: str) -> str | None:
    """The peer of a :func:`purge_key`, or None for any other key."""
    return key[1:] if key.startswith(_SEP) and len(key) > 1 else None


def progress_key(txlog_partition: int) -> str:
    """The ``queues`` key of partition ``txlog_partition``'s QueueProgress (never has a NUL)."""
    return f"{_PROGRESS_PREFIX}{txlog_partition}"


def is_progress_key(key: str) -> bool:
    """Whether ``key`` is a progress key rather than a queue entry key."""
    return _SEP not in key and key.startswith(_PROGRESS_PREFIX)


@dataclass(frozen=True)
class Event:
    """One decoded txlog record of a peer: kind, position, message id, time, Send fields."""

    kind: str
    offset: int
    timestamp_ms: int
    message_id: str = ""
    record: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Letter:
    """A message dead-lettered by a batch: its Send's txlog offset (and the Send itself when it
    was in the same batch), the failure count and the last failure's reason and offset."""

    message_id: str
    send_offset: int
    delivery_count: int
    reason: str
    fail_offset: int
    send: Event | None = None


@dataclass(frozen=True)
class Change:
    """A net change of a batch: ``upsert`` with the queuing Send, or a tombstone.

    An upsert whose Send was in an earlier batch (only its delivery count changed) has
    ``send`` None and the Send's offset in ``send_offset``. ``letters`` are the dead letters
    this batch produced for the id (normally with a tombstone; rarely several, when tiny
    lifetimes let the id be queued and fail again within one batch).
    """

    message_id: str
    upsert: bool
    send: Event | None = None
    delivery_count: int = 0
    letters: tuple[Letter, ...] = ()
    send_offset: int = -1


@dataclass(frozen=True)
class Ttl:
    """How long memories last, in the peer's log time (milliseconds), and after how many
    failed deliveries a message is dead-lettered."""

    ack_ttl_ms: int = DEFAULT_ACK_TTL_MS
    dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT

    def of(self, cls: int) -> int:
        """The lifetime of memory class ``cls`` (:data:`DEDUP` or :data:`EARLY`)."""
        return self.dedup_window_ms if cls == DEDUP else self.ack_ttl_ms


@dataclass(frozen=True)
class Entry:
    """One message id of a peer: queued (with its Send's offset), or remembered until a time.

    ``delivery_count`` (failed deliveries so far) travels on the QueueEntry.
    """

    queued: bool
    offset: int = -1
    until: int = 0
    delivery_count: int = 0
    #: an early failure's: one of its failures was terminal, and the last one's reason
    terminal: bool = False
    reason: str = ""

    @property
    def failed_early(self) -> bool:
        """An early failure: failures of an id whose Send has not been seen (not expired
        is the caller's check: ``until`` against the clock)."""
        return not self.queued and self.delivery_count > 0

    def blocks_send(self, clock: int) -> bool:
        """Whether a Send of this id is ignored at ``clock`` (queued, or still remembered as
        acked, purged or dead-lettered; an early failure waits for its Send)."""
        return self.queued or (self.until > clock and not self.failed_early)


@dataclass(frozen=True)
class Fifo:
    """Chunk sequence numbers ``[head, tail)`` of one expiry FIFO; ``head_until`` is the
    expiry of the chunk at ``head`` (0 when unknown: look at it in the next batch)."""

    head: int = 0
    tail: int = 0
    head_until: int = 0

    @property
    def empty(self) -> bool:
        """No chunk left."""
        return self.head >= self.tail


@dataclass(frozen=True)
class PeerMeta:
    """A peer's clock, number of queued messages, its two expiry FIFOs, and the offset its
    latest Purge reaches (-1: never purged): a Send below it is purged when it comes."""

    clock: int = 0
    queued: int = 0
    fifos: tuple[Fifo, Fifo] = (Fifo(), Fifo())
    purged_below: int = -1

    @property
    def empty(self) -> bool:
        """Nothing queued and nothing remembered (the meta is kept anyway, for its clock)."""
        return self.queued == 0 and all(f.empty for f in self.fifos)


@dataclass(frozen=True)
class Chunk:
    """Ids remembered one after another in one FIFO; ``until`` is the last (largest) expiry."""

    until: int
    ids: tuple[str, ...]


@dataclass
class PeerPlan:
    """What one peer's batch decided: output changes and state changes."""

    changes: list[Change]
    writes: dict[str, Entry | None]              # message id -> new entry; None: delete it
    chunks: list[tuple[int, int, Chunk]] = field(default_factory=list)  # (class, seq, chunk)
    meta: PeerMeta = PeerMeta()


def plan_events(meta: PeerMeta | None, entries: Mapping[str, Entry | None],
                events: Iterable[Event], ttl: Ttl) -> PeerPlan:
    """Decide one peer's batch: ``events`` in txlog offset order, against the state.

    ``entries`` must hold the stored entry (or ``None``) of every message id the events name
    and, if they contain a Purge, of every queued message of the peer.
    """
    meta = meta or PeerMeta()
    clock, queued, floor = meta.clock, meta.queued, meta.purged_below
    overlay: dict[str, Entry | None] = dict(entries)
    pending: tuple[list[tuple[str, int]], list[tuple[str, int]]] = ([], [])
    queued_by: dict[str, Event] = {}
    touched: set[str] = set()
    letters: dict[str, list[Letter]] = {}

    def remember(mid: str, cls: int, early_failure: Entry | None = None) -> None:
        until = clock + ttl.of(cls)
        cur = overlay.get(mid)
        if cur is not None and not cur.queued and cur.until >= until and \
                not cur.failed_early and early_failure is None:
            return  # already remembered for longer
        if until <= clock:  # a zero lifetime: forget at once
            overlay[mid] = None
            return
        overlay[mid] = (Entry(False, until=until) if early_failure is None
                        else replace(early_failure, until=until))
        pending[cls].append((mid, until))

    def live(entry: Entry | None) -> Entry | None:
        """``entry`` unless it is a memory that has expired at the clock."""
        return None if entry is None or (not entry.queued and entry.until <= clock) else entry

    for ev in events:
        if ev.timestamp_ms > clock:
            clock = ev.timestamp_ms
        mid = ev.message_id
        if ev.kind == SEND:
            cur = live(overlay.get(mid))
            if cur is not None and cur.blocks_send(clock):
                continue
            if ev.offset < floor:  # purged before it came (the Purge was read first)
                touched.add(mid)
                remember(mid, DEDUP)
                continue
            count = int((ev.record or {}).get("delivery_count", 0) or 0)
            touched.add(mid)
            if cur is not None and cur.failed_early:  # its failures came first
                count += cur.delivery_count
                if count >= ttl.delivery_limit or cur.terminal:
                    letters.setdefault(mid, []).append(Letter(mid, ev.offset, count, cur.reason,
                                                              cur.offset, ev))
                    remember(mid, EARLY)
                    continue
            overlay[mid] = Entry(True, offset=ev.offset, delivery_count=count)
            queued_by[mid] = ev
            queued += 1
        elif ev.kind == ACK:
            cur = live(overlay.get(mid))
            touched.add(mid)
            if cur is not None and cur.queued:
                queued -= 1
                remember(mid, DEDUP)
            else:
                remember(mid, EARLY)
        elif ev.kind == FAIL:
            cur = live(overlay.get(mid))
            rec = ev.record or {}
            reason, terminal = str(rec.get("reason", "")), bool(rec.get("terminal"))
            if cur is None or cur.failed_early:  # before its Send: remembered for it
                touched.add(mid)
                prior = cur or Entry(False)
                remember(mid, EARLY, Entry(False, ev.offset, 0, prior.delivery_count + 1,
                                           prior.terminal or terminal, reason))
                continue
            if not cur.queued:
                continue  # acked, purged or dead-lettered: ignored
            touched.add(mid)
            count = cur.delivery_count + 1
            if count < ttl.delivery_limit and not terminal:
                overlay[mid] = replace(cur, delivery_count=count)
                continue
            send = queued_by.pop(mid, None)
            letters.setdefault(mid, []).append(Letter(mid, cur.offset, count, reason,
                                                      ev.offset, send))
            queued -= 1
            remember(mid, EARLY)
        elif ev.kind == PURGE:  # its offset: the Purge reaches the Sends below it
            floor = max(floor, ev.offset)
            for qid in [m for m, e in overlay.items()
                        if e is not None and e.queued and e.offset < ev.offset]:
                touched.add(qid)
                queued -= 1
                queued_by.pop(qid, None)
                remember(qid, DEDUP)
        else:
            raise ValueError(f"unknown event kind {ev.kind!r}")

    changes: list[Change] = []
    writes: dict[str, Entry | None] = {}
    for mid in sorted(touched):
        start, end = entries.get(mid), overlay.get(mid)
        if end != start:
            writes[mid] = end
        lets = tuple(letters.get(mid, ()))
        was = start is not None and start.queued
        if end is not None and end.queued:
            if mid in queued_by:  # queued (or re-queued) here
                changes.append(Change(mid, True, queued_by[mid], end.delivery_count, lets,
                                      end.offset))
            elif start is None or end.delivery_count != start.delivery_count or lets:
                changes.append(Change(mid, True, None, end.delivery_count, lets, end.offset))
        elif was or lets:
            changes.append(Change(mid, False, letters=lets))
    fifos = list(meta.fifos)
    chunks: list[tuple[int, int, Chunk]] = []
    for cls in (DEDUP, EARLY):
        for chunk in _chunked(pending[cls]):
            fifo = fifos[cls]
            head_until = chunk.until if fifo.empty else fifo.head_until
            head = fifo.tail if fifo.empty else fifo.head
            chunks.append((cls, fifo.tail, chunk))
            fifos[cls] = Fifo(head, fifo.tail + 1, head_until)
    return PeerPlan(changes, writes, chunks,
                    PeerMeta(clock, queued, (fifos[0], fifos[1]), floor))


def _chunked(items: list[tuple[str, int]]) -> Iterable[Chunk]:
    """Split ``(id, until)`` pairs (untils non-decreasing) into bounded chunks."""
    ids: list[str] = []
    size, until = 0, 0
    for mid, mid_until in items:
        length = len(mid.encode()) + 4
        if ids and (len(ids) >= CHUNK_IDS or size + length > CHUNK_BYTES):
            yield Chunk(until, tuple(ids))
            ids, size = [], 0
        ids.append(mid)
        size += length
        until = mid_until
    if ids:
        yield Chunk(until, tuple(ids))
