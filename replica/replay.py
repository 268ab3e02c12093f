"""The ``Replay`` stream on a replica node: barrier, pin, queue in txlog order, ack pacing.

For a peer of this node's partitions the node takes a barrier (the txlog high watermark of
the peer's partition), pins the GC point there (a lease, :mod:`tidemark.replica.leases`), tells the
peer (header), waits until its own copy of the Spark job's QueueProgress for the partition
reaches the barrier, then streams the peer's queue entries below the barrier from the queue
index (:mod:`tidemark.replica.queue_index`) in txlog order: ``batch`` entries at a time, the next
batch only once at most ``window`` are unacked, so at most ``batch + window`` are ever
unacked. At most two batches are in memory (the one sent and the next, read ahead). The
last message says the replay is complete up to the barrier; the stream then stays open
(renewing the pin with every message of the peer) until the peer closes its side. Wire
format: :mod:`tidemark.gossip.replay`.

Two requests change the barrier: ``barrier`` (a retry on another replica keeps the barrier
of the replay it resumes, so it does not wait for the queues again) and ``covered`` (the
barrier is what the queues already cover, when they are behind the high watermark, offset 0
when they have covered nothing yet: no wait at all; the peer reads the rest from txlog
itself, and the header's ``high_watermark`` tells it how far the queues were behind).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from tidemark.gossip.exceptions import (
    PinExpiredError,
    QueuesBehindError,
    ReplayError,
    ReplayRefusedError,
    ReplicaBusyError,
)
from tidemark.gossip.replay import (
    COMPLETE,
    DEFAULT_BATCH,
    DEFAULT_WINDOW,
    HEADER,
    WAITING,
    entries_message,
)
from tidemark.log import clock
from tidemark.log.exceptions import CodecError
from tidemark.log.offsets import watermarks
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.settings import Settings
from tidemark.log.wire import RowError, default_codec, queue_entry
from tidemark.replica.leases import Leases
from tidemark.replica.queue_index import Framed, read_queue_framed
from tidemark.replica.store import Store, progress_key
from tidemark.replica.unacked import Unacked

__all__ = ["ReplayService", "ReplayLimits", "Session"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayLimits:
    """Server-side defaults and bounds of a replay (the request may ask for others)."""

    barrier_timeout_ms: int = 30_000
    max_barrier_timeout_ms: int = 600_000
    max_batch: int = 100_000
    message_bytes: int = 4 << 20   # entries per gRPC message are cut at this size
    max_sessions: int = 32         # each holds a server thread (of 64) until the peer closes


@dataclass
class Session:
    """One running replay: what was sent and acked (guarded by ``cond``)."""

    peer: str
    pin: str
    partition: int
    barrier: int
    batch: int
    window: int
    rows: bool = False  # the peer reads replay rows (else: QueueEntry bytes)
    state: str = "waiting for queues"   # then streaming / waiting for acks / complete
    sent: int = 0
    acked: int = 0
    unacked: Unacked = field(default_factory=Unacked)
    ended: bool = False          # the peer closed its side or went away
    cond: threading.Condition = field(default_factory=threading.Condition)

    def ack(self, doc: Mapping[str, Any]) -> None:
        """Apply one ack message from the peer."""
        with self.cond:
            self.acked += self.unacked.take(int(doc.get("ack", 0)))
            through = doc.get("acked_offset")
            if through is not None:
                self.acked += self.unacked.take_through(int(through))
            self.cond.notify_all()

    def end(self) -> None:
        """The peer's side is gone."""
        with self.cond:
            self.ended = True
            self.cond.notify_all()

    def row(self) -> dict[str, Any]:
        """Status form."""
        with self.cond:
            return {"peer": self.peer, "state": self.state, "partition": self.partition,
                    "barrier": self.barrier, "sent": self.sent, "acked": self.acked,
                    "unacked": len(self.unacked), "batch": self.batch, "window": self.window}


class ReplayService:
    """Serves ``Replay`` for one node (see the module docstring)."""

    def __init__(self, node_id: str, settings: Settings, store: Store, leases: Leases,
                 owned: Callable[[], Sequence[int]], gc_point: Callable[[], Mapping[str, int]],
                 progress: threading.Condition, stopping: threading.Event,
                 limits: ReplayLimits = ReplayLimits(),
                 high_watermark: Callable[[int], int] | None = None) -> None:
        self.node_id, self.settings, self.store, self.leases = node_id, settings, store, leases
        self.owned, self.gc_point, self.progress, self.stopping = (owned, gc_point, progress,
                                                                    stopping)
        self.limits = limits
        self.high_watermark = high_watermark or self._high_watermark
        self.codec = default_codec()
        self._lock = threading.Lock()
        self.sessions: dict[str, Session] = {}

    def _high_watermark(self, k: int) -> int:
        return watermarks(self.settings, "txlog", [k], timeout=10.0)[k][1]

    # ---- status ----------------------------------------------------------------------------
    def pin_rows(self) -> list[dict[str, Any]]:
        """The node's pins for ``status --json``, each with its running replay if any."""
        with self._lock:
            sessions = dict(self.sessions)
        rows = self.leases.status()
        for row in rows:
            session = sessions.get(row["pin"])
            if session is not None:
                row["replay"] = session.row()
        return rows

    # ---- the request -----------------------------------------------------------------------
    def _parse(self, raw: bytes | None) -> dict[str, Any]:
        if raw is None:
            raise ReplayRefusedError("replay request missing")
        try:
            req = json.loads(raw)
            peer, env = str(req["peer"]), str(req["environment"])
        except (ValueError, KeyError, TypeError):
            raise ReplayRefusedError("malformed replay request: JSON with peer and "
                                     "environment expected") from None
        if not peer or "\0" in peer:
            raise ReplayRefusedError(f"bad peer id {peer!r}")
        if env != self.settings.environment:
            raise ReplayRefusedError(
                f"replay of {peer} refused: environment {env!r} is not this cluster's "
                f"environment {self.settings.environment!r} (node {self.node_id})")
        k = partition_for_peer(peer, self.settings.partitions)
        if k not in self.owned():
            raise ReplayRefusedError(
                f"{self.node_id} does not own txlog/{k}, the partition of peer {peer}: ask "
                "a replica of that partition")
        batch = int(req.get("batch", DEFAULT_BATCH))
        window = int(req.get("window", DEFAULT_WINDOW))
        if not 0 < batch <= self.limits.max_batch or window < 0:
            raise ReplayRefusedError(f"bad batch/window {batch}/{window}: batch must be in "
                                     f"1..{self.limits.max_batch}, window >= 0")
        timeout = int(req.get("barrier_timeout_ms") or self.limits.barrier_timeout_ms)
        barrier = req.get("barrier")
        if barrier is not None and (not isinstance(barrier, int) or barrier < 0):
            raise ReplayRefusedError(f"bad barrier {barrier!r}: a txlog offset >= 0")
        return {"peer": peer, "partition": k, "batch": batch, "window": window,
                "barrier": barrier, "covered": req.get("covered") is True,
                "lease_ms": req.get("lease_ms"), "after": int(req.get("after_offset", -1)),
                "rows": req.get("rows") is True,
                "timeout_ms": max(0, min(timeout, self.limits.max_barrier_timeout_ms))}

    def handle(self, requests: Iterator[bytes], context: grpc.ServicerContext
               ) -> Iterator[bytes]:
        """The ``Replay`` stream handler."""
        req = self._parse(next(requests, None))
        peer, k = req["peer"], req["partition"]
        with self._lock:
            if len(self.sessions) >= self.limits.max_sessions:
                raise ReplicaBusyError(f"{self.node_id} already serves "
                                       f"{len(self.sessions)} replays: try another replica")
        try:
            barrier = self.high_watermark(k)
        except Exception as exc:  # Kafka unreachable: no barrier, no replay
            raise ReplayError(f"{self.node_id} cannot take the replay barrier of {peer}: the "
                              f"txlog/{k} high watermark is unknown ({exc})") from None
        high_watermark = barrier
        if req["barrier"] is not None:  # a retry keeps the barrier of the replay it resumes
            barrier = min(barrier, req["barrier"])
        elif req["covered"]:
            # start on what the queues already cover: the peer reads the rest from txlog
            # (its handover), so it does not wait for the queues job to catch up
            # (no QueueProgress yet: the job has covered nothing, so the tail is all of it)
            got = self.queue_progress(k)
            barrier = min(barrier, got[0] if got is not None else 0)
        lease = self.leases.grant({f"txlog/{k}": barrier}, self.gc_point(), req["lease_ms"],
                                  owner=peer)
        session = Session(peer, lease.pin, k, barrier, req["batch"], req["window"], req["rows"])
        with self._lock:
            self.sessions[lease.pin] = session
        context.add_callback(session.end)
        threading.Thread(target=self._read_acks, args=(requests, session),
                         name=f"replay-acks-{peer}", daemon=True).start()
        log.info("replay of %s: txlog/%d barrier %d, pin %s", peer, k, barrier, lease.pin)
        try:
            yield HEADER + json.dumps({
                "pin": lease.pin, "barrier": barrier, "partition": k, "node": self.node_id,
                "high_watermark": high_watermark,
                "peer": peer, "lease_ms": lease.lease_ms, "expires_ms": lease.expires_ms,
                "batch": session.batch, "window": session.window}).encode()
            try:
                covered = yield from self._await_barrier(session, req["timeout_ms"])
                if not covered:
                    return  # the peer went away or the node is stopping: the lease decides
            except QueuesBehindError:
                self.leases.release(lease.pin)  # nothing will be replayed under this pin
                raise
            yield from self._stream(session, req["after"], context)
        finally:
            with self._lock:
                self.sessions.pop(lease.pin, None)

    def _read_acks(self, requests: Iterator[bytes], session: Session) -> None:
        """The peer's messages: every one renews the pin; acks pace the stream."""
        try:
            for raw in requests:
                self.leases.renew(session.pin)
                try:
                    session.ack(json.loads(raw))
                except (ValueError, TypeError, AttributeError):
                    log.warning("replay of %s: unreadable message from the peer ignored",
                                session.peer)
        except Exception as exc:  # the call ended under us (cancelled, node stopping)
            log.debug("replay of %s: request stream ended: %s", session.peer, exc)
        session.end()

    # ---- the barrier -----------------------------------------------------------------------
    def queue_progress(self, k: int) -> tuple[int, int] | None:
        """``(next_offset, timestamp_ms)`` of this node's copy of the partition's
        QueueProgress, or None if it has none."""
        raw = self.store.db.get(progress_key(k))
        if raw is None:
            return None
        try:
            rec = self.codec.decode(raw).record
            return int(rec["next_offset"]), int(rec["timestamp_ms"])
        except (CodecError, KeyError, TypeError):
            return None

    def _await_barrier(self, session: Session, timeout_ms: int
                       ) -> Generator[bytes, None, bool]:
        """Wait until this node's QueueProgress of the partition reaches the barrier (True);
        False if the peer went away or the node is stopping; raises
        :class:`QueuesBehindError` at the deadline. While waiting, yields a ``W`` message
        (the queues' progress and the barrier) at once and then about every second, so the
        peer can show what it waits for."""
        k, barrier = session.partition, session.barrier
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        told = 0.0
        while True:
            with self.progress:
                got = self.queue_progress(k)
                at = got[0] if got else 0
                if at >= barrier:
                    return True
                if session.ended or self.stopping.is_set():
                    return False
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    break
                if now - told < 1.0:
                    session.state = "waiting for queues"
                    self.progress.wait(min(left, 0.5))
                    continue
            told = now
            yield WAITING + json.dumps({"queue_progress": at, "barrier": barrier,
                                        "waited_ms": int((now - started) * 1000)}).encode()
        raise QueuesBehindError(self._behind(session, got, time.monotonic() - started))

    def _behind(self, session: Session, got: tuple[int, int] | None, waited_s: float) -> str:
        """The timeout message: how far behind the queues are, in offsets and seconds."""
        k, barrier, now_ms = session.partition, session.barrier, clock.now_ms()
        at = got[0] if got else 0
        text = (f"queues of txlog/{k} are behind the replay barrier of {session.peer}: "
                f"QueueProgress at offset {at}, barrier {barrier}: {barrier - at} offsets "
                f"behind")
        oldest = self._record_ms(k, at, barrier)
        if oldest is not None:
            text += f", {max(0, now_ms - oldest) / 1000:.1f} s behind (oldest txlog record " \
                    f"not in the queues, offset >= {at})"
        if got is not None:
            text += f"; last progress written {max(0, now_ms - got[1]) / 1000:.1f} s ago"
        else:
            text += "; no QueueProgress for this partition yet (is the queues job running?)"
        return text + f"; waited {waited_s:.1f} s on {self.node_id}"

    def _record_ms(self, k: int, start: int, end: int) -> int | None:
        """``timestamp_ms`` of the first stored txlog record in ``[start, end)``."""
        for _, value in self.store.records(k, start, end):
            try:
                return int(self.codec.decode(value).record["timestamp_ms"])
            except (CodecError, KeyError, TypeError):
                return None
        return None

    # ---- the stream ------------------------------------------------------------------------
    def _stream(self, session: Session, after: int, context: grpc.ServicerContext
                ) -> Iterator[bytes]:
        k, peer, barrier = session.partition, session.peer, session.barrier
        batch_no, started = 0, time.monotonic()
        chunks, last = self._read(session, after)
        while last is not None:
            after = last
            with session.cond:
                while len(session.unacked) > session.window:
                    session.state = "waiting for acks"
                    if session.ended or self.stopping.is_set() or not context.is_active():
                        return
                    if self.leases.get(session.pin) is None:
                        raise PinExpiredError(
                            f"pin {session.pin} of {peer} expired: no message from the peer "
                            "for a whole lease")
                    session.cond.wait(0.5)
                session.state = "streaming"
                at_start = len(session.unacked)
            if chunks:
                batch_no += 1
                for offsets, body in chunks:
                    with session.cond:
                        session.unacked.extend(offsets)
                        session.sent += len(offsets)
                        unacked = len(session.unacked)
                    yield entries_message(batch_no, at_start, unacked, body)
            # the next batch is read while the peer works on this one (two batches in memory)
            chunks, last = self._read(session, after)
        with session.cond:
            session.state = "complete"
            sent = session.sent
        elapsed = time.monotonic() - started
        log.info("replay of %s complete up to barrier %d: %d entries in %.2f s", peer,
                 barrier, sent, elapsed)
        yield COMPLETE + json.dumps({
            "text": f"replay complete up to barrier {barrier}", "barrier": barrier,
            "partition": k, "pin": session.pin, "sent": sent, "batches": batch_no,
            "elapsed_ms": int(elapsed * 1000)}).encode()
        # The stream stays open until the peer closes its side: its messages keep renewing
        # the pin (e.g. during its handover); the pin's lease ends it otherwise.
        with session.cond:
            while not session.ended and not self.stopping.is_set() and context.is_active():
                if self.leases.get(session.pin) is None:
                    return
                session.cond.wait(1.0)

    def _read(self, session: Session, after: int) -> tuple[list[Framed], int | None]:
        """The next batch of the session's queue after txlog offset ``after``, framed in
        chunks of at most ``limits.message_bytes``, and the last offset read."""
        convert = None if session.rows else functools.partial(_queue_entry, session.peer)
        return read_queue_framed(self.store, session.partition, session.peer, after,
                                 session.barrier, session.batch, self.limits.message_bytes,
                                 convert)


def _queue_entry(peer: str, offset: int, value: bytes) -> bytes:
    """A stored entry as a peer from before replay rows reads it: QueueEntry bytes; a damaged
    row is sent as it is (the peer skips it and it stays queued)."""
    try:
        return queue_entry(value, peer)
    except RowError:
        log.error("replay of %s: the row at txlog offset %d is damaged", peer, offset)
        return value
