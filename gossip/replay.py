"""The ``Replay`` stream of the replica service: its wire format and the peer's side of it.

``Replay`` is bidirectional. The peer's first message is JSON ``{peer, environment, batch,
window, lease_ms?, barrier_timeout_ms?, after_offset?, barrier?, covered?}`` (``barrier``: a
retry keeps the barrier of the replay it resumes, so it does not wait for the queues again;
``covered``: the barrier is what the queues already cover, so there is no wait at all);
after it, ``{"ack": n}`` (n more entries processed), ``{"acked_offset": o}`` (every entry
up to txlog offset o processed) or ``{"renew": true}``; every message renews the replay's
pin. The replica answers with tagged messages: ``H`` + JSON header (pin, barrier,
partition, node: sent once pinned, before the queues are awaited), ``W`` + JSON
(``queue_progress``, ``barrier``, ``waited_ms``: about every second while the queues have
not reached the barrier), ``E`` + ``>III`` (batch number, unacked when the batch started,
unacked after this message) + records ``>QI`` (txlog offset, length) + the entry as stored
(its replay row, :mod:`tidemark.log.wire.replay_rows`, or QueueEntry bytes), and a last
``C`` + JSON (``replay complete up to barrier B``), after which the replica keeps the call
open until the peer closes its side. Errors end the stream with a gRPC status whose trailing
metadata ``tidemark-error`` names the :mod:`tidemark.gossip.exceptions` class.
:class:`ReplayStream` is the peer's handle on one replay.

A replica that is cut off (a partition drops its packets: no reset, no error) would leave
the peer waiting forever on a connection gRPC still thinks is up. So whenever the peer waits
for the replica's next message (everything it processed is acked, so the replica owes it
one: a header, entries, ``W`` every second, or the completion), it waits at most
``stall_timeout_s`` (:data:`STALL_TIMEOUT_S`); then it cancels the call and raises
:class:`~tidemark.gossip.exceptions.NodeUnreachableError` (no header yet) or
:class:`~tidemark.gossip.exceptions.ReplayInterruptedError` (mid-stream), and the replayer
resumes on another replica.
"""

from __future__ import annotations

import json
import logging
import queue
import struct
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

import grpc

from tidemark.gossip.exceptions import (
    REPLAY_ERRORS,
    NodeUnreachableError,
    ReplayError,
    ReplayInterruptedError,
)

__all__ = ["ReplayEntry", "ReplayStream", "ERROR_KEY", "HEADER", "ENTRIES", "COMPLETE", "WAITING",
           "encode_entries", "entries_message", "entry_rows", "read_rows",
           "ENTRY_RECORD", "ENTRIES_START", "ChunkReader",
           "DEFAULT_BATCH", "DEFAULT_WINDOW",
           "STALL_TIMEOUT_S", "request_peer"]

log = logging.getLogger(__name__)

HEADER, ENTRIES, COMPLETE, WAITING = b"H", b"E", b"C", b"W"
#: Trailing-metadata key naming the error class of a failed replay.
ERROR_KEY = "tidemark-error"
#: 5000 entries per batch, the next batch once at most 5000 are unacked (the replica reads
#: it ahead: at most 10000 are in flight). Zebus sends 2000 and the next once at most 200 are
#: unacked; on a Python peer that leaves it idle while the next batch travels (a 1M replay:
#: 71k msgs/s with 2000/200, 86k with 2000/2000, 92k with 5000/5000; docs/replay.md).
DEFAULT_BATCH, DEFAULT_WINDOW = 5000, 5000
_META = struct.Struct(">III")
_END = object()   # the replica's side of the call ended
_PREFETCH = 2     # replica messages read ahead of the consumer
#: How long the peer waits for the replica's next message before it gives the replica up.
#: The replica sends one at least every second while it waits for the queues, and at once
#: when the peer's acks open its window; 20 s leaves room for a busy machine.
STALL_TIMEOUT_S = 20.0
_REC = struct.Struct(">QI")
#: The head of each entry of an ``E`` message: its txlog offset and byte length.
ENTRY_RECORD = _REC

CallJson = Callable[[str, str, Mapping[str, Any], float], Any]
T = TypeVar("T")
#: Reads the entries of an ``E`` message from a byte position: ``(what to yield, how many
#: entries, the last one's txlog offset)`` (:func:`read_rows`).
ChunkReader = Callable[[bytes, int], tuple[T, int, int]]


def request_peer(first: bytes | None) -> str | None:
    """The peer whose queue the first message of a ``Replay`` asks for, read exactly as the
    replica reads it (``str(request["peer"])``); None if unreadable (the replica then
    refuses the request as malformed)."""
    if first is None:
        return None
    try:
        return str(json.loads(first)["peer"])
    except (ValueError, KeyError, TypeError, IndexError):
        return None


class ReplayEntry(NamedTuple):
    """One replayed queue entry: its txlog offset and the entry as stored, a replay row
    (:mod:`tidemark.log.wire.replay_rows`) or QueueEntry bytes
    (:func:`tidemark.log.wire.replay_rows.entry_record` reads both)."""

    offset: int
    value: bytes


def encode_entries(batch_no: int, unacked_at_start: int, unacked: int,
                   rows: Iterable[tuple[int, bytes]]) -> bytes:
    """An ``E`` message."""
    parts: list[bytes] = []
    for off, value in rows:
        parts.append(_REC.pack(off, len(value)))
        parts.append(value)
    return entries_message(batch_no, unacked_at_start, unacked, b"".join(parts))


def entries_message(batch_no: int, unacked_at_start: int, unacked: int, body: bytes) -> bytes:
    """An ``E`` message whose entries, each :data:`ENTRY_RECORD` and the entry, are ``body``
    (a replica frames them as it reads its queue index)."""
    return b"".join((ENTRIES, _META.pack(batch_no, unacked_at_start, unacked), body))


#: Where the entries of an ``E`` message start.
ENTRIES_START = 1 + _META.size


def entry_rows(msg: bytes, pos: int = ENTRIES_START) -> list[tuple[int, bytes]]:
    """``[(offset, value)]`` of the entries of ``E`` message ``msg`` from byte ``pos``."""
    end = len(msg)
    rows: list[tuple[int, bytes]] = []
    unpack, size, append = _REC.unpack_from, _REC.size, rows.append
    while pos < end:
        off, n = unpack(msg, pos)
        pos += size
        append((off, msg[pos:pos + n]))
        pos += n
    return rows


def read_rows(msg: bytes, pos: int) -> tuple[list[tuple[int, bytes]], int, int]:
    """The default reader of :meth:`ReplayStream.entry_chunks`: the entries' ``(offset,
    value)`` pairs, their count and the last offset (-1 if none)."""
    rows = entry_rows(msg, pos)
    return rows, len(rows), rows[-1][0] if rows else -1


class _Stalled(Exception):
    """No message from the replica within the stream's ``stall_timeout_s``."""


class ReplayStream:
    """A running replay: iterate :meth:`entries`, :meth:`ack` what was processed,
    :meth:`close` at the end.

    Acks are coalesced (sent every ``window // 2``, and always before waiting for the next
    message, so a consumer that acked everything never stalls the stream). While the
    stream is open a keepalive thread renews the pin every third of its lease (a message on
    the stream); once the stream ended, through ``RenewPin``, until :meth:`close` — so the
    pin lives exactly as long as this process keeps the stream, and a killed peer's pin
    expires within its lease. ``close(release=False)`` keeps the pin for a handover that
    renews it itself.
    """

    def __init__(self, open_call: Callable[[Iterator[bytes]], Any], address: str,
                 request: Mapping[str, Any], call_json: CallJson, node: str = "",
                 auto_renew: bool = True, stall_timeout_s: float = STALL_TIMEOUT_S) -> None:
        self.address, self.node, self.peer = address, node, str(request["peer"])
        self.window = int(request.get("window", DEFAULT_WINDOW))
        self._call_json = call_json
        self._out: queue.Queue[bytes | None] = queue.Queue()
        self._out.put(json.dumps(dict(request)).encode())
        self._lock = threading.Lock()
        self._pending, self._pending_offset = 0, -1
        self._flush_every = max(1, self.window // 2)
        self._closed = threading.Event()
        self._streaming = True
        self.received = self.acked = 0
        self.last_offset = int(request.get("after_offset", -1))
        self.max_unacked = self.max_unacked_at_batch_start = 0
        self.batches = 0
        self.complete: dict[str, Any] | None = None
        #: the replica's last ``W`` message while it waited for the queues (None: none yet)
        self.waiting: dict[str, Any] | None = None
        self.streaming_entries = False  # the first entries (or completion) arrived
        self.pin_lost = False
        self.stall_timeout_s = stall_timeout_s
        self._responses = open_call(self._requests())
        # the replica's messages are read ahead of the consumer by one thread for the whole
        # call, so that every wait for the next one can have a deadline
        self._box: queue.Queue[Any] = queue.Queue(maxsize=_PREFETCH)
        threading.Thread(target=self._pull, args=(self._box,), daemon=True,
                         name=f"replay-read-{self.peer}").start()
        try:
            first = self._next()
        except grpc.RpcError as exc:
            self._finish()
            err = self._error(exc)
            if isinstance(err, ReplayInterruptedError):
                raise NodeUnreachableError(f"replica {address} unreachable for the replay of"
                                           f" {self.peer}: {exc.code().name}") from None
            raise err from None
        except _Stalled:
            self.close(release=False)
            raise NodeUnreachableError(f"replica {address} sent no header for the replay of"
                                       f" {self.peer} within {stall_timeout_s:g} s") from None
        if first is _END:
            self._finish()
            raise ReplayError(f"replica {address} ended the replay of {self.peer} without "
                              "a header")
        if first[:1] != HEADER:
            self._finish()
            raise ReplayError(f"replica {address} answered the replay with {first[:1]!r}")
        self.header: dict[str, Any] = json.loads(first[1:])
        self.pin: str = self.header["pin"]
        self.barrier: int = int(self.header["barrier"])
        self.partition: int = int(self.header["partition"])
        self.node = self.header.get("node", node)
        self.lease_ms: int = int(self.header.get("lease_ms", 30_000))
        self._renewer: threading.Thread | None = None
        if auto_renew:
            self._renewer = threading.Thread(target=self._keepalive, daemon=True,
                                             name=f"replay-renew-{self.peer}")
            self._renewer.start()

    # ---- the request side ------------------------------------------------------------------
    def _requests(self) -> Iterator[bytes]:
        while True:
            item = self._out.get()
            if item is None:
                return
            yield item

    def _send(self, doc: Mapping[str, Any]) -> None:
        if not self._closed.is_set():
            self._out.put(json.dumps(dict(doc)).encode())

    @property
    def ack_every(self) -> int:
        """Acks are sent once this many are pending (a consumer may process in such chunks)."""
        return self._flush_every

    def ack(self, n: int = 1) -> None:
        """``n`` more entries were processed."""
        with self._lock:
            self._pending += n
            self.acked += n
            due = self._pending >= self._flush_every
        if due:
            self.flush()

    def ack_through(self, offset: int) -> None:
        """Every entry up to txlog ``offset`` was processed."""
        with self._lock:
            self._pending_offset = max(self._pending_offset, offset)
        self.flush()

    def flush(self) -> None:
        """Send the acks not sent yet."""
        with self._lock:
            n, off = self._pending, self._pending_offset
            self._pending, self._pending_offset = 0, -1
        doc: dict[str, int] = {}
        if n:
            doc["ack"] = n
        if off >= 0:
            doc["acked_offset"] = off
        if doc and self._streaming:
            self._send(doc)

    def renew(self) -> bool:
        """Renew the pin now; False if the replica no longer holds it."""
        if self._streaming and not self._responses.done():
            self._send({"renew": True})
            return True
        reply = self._call_json(self.address, "RenewPin", {"pin": self.pin}, 5.0)
        if not reply.get("renewed"):
            self.pin_lost = True
        return bool(reply.get("renewed"))

    def _keepalive(self) -> None:
        every = max(0.1, self.lease_ms / 3000)
        while not self._closed.wait(every):
            try:
                if not self.renew():
                    log.warning("pin %s of %s on %s expired", self.pin, self.peer, self.address)
                    return
            except grpc.RpcError as exc:  # the replica is away: try again next period
                if exc.code() in (grpc.StatusCode.UNAUTHENTICATED,
                                  grpc.StatusCode.PERMISSION_DENIED):
                    log.error("renewing pin %s on %s refused: %s", self.pin, self.address,
                              exc.details())
                    self.pin_lost = True
                    return
                log.debug("renewing pin %s on %s failed: %s", self.pin, self.address,
                          exc.code())

    # ---- the response side -----------------------------------------------------------------
    def entries(self) -> Iterator[ReplayEntry]:
        """The queue's entries in txlog order, up to the barrier. Raises
        :class:`~tidemark.gossip.exceptions.QueuesBehindError` if the queues do not reach the
        barrier in time, :class:`~tidemark.gossip.exceptions.ReplayInterruptedError` if the replica
        goes away (retry elsewhere with ``after_offset=stream.last_offset`` and dedup)."""
        frames = self._frames()
        try:
            for msg in frames:
                for row in entry_rows(msg):
                    self.received += 1
                    self.last_offset = row[0]
                    yield ReplayEntry._make(row)
        finally:
            frames.close()

    def entry_batches(self) -> Iterator[list[tuple[int, bytes]]]:
        """Like :meth:`entries`, one list of ``(txlog offset, value)`` per message the
        replica sent (``received`` and ``last_offset`` move by whole messages); same errors."""
        return self.entry_chunks(read_rows)

    def entry_chunks(self, read: ChunkReader[T]) -> Iterator[T]:
        """:meth:`entry_batches`, each message's entries read by ``read`` (a peer reads them
        straight into the form it processes); messages without entries are skipped."""
        frames = self._frames()
        try:
            for msg in frames:
                got, n, last = read(msg, ENTRIES_START)
                if n:
                    self.received += n
                    self.last_offset = last
                    yield got
        finally:
            frames.close()

    def _pull(self, box: queue.Queue[Any]) -> None:
        """Read the replica's messages ahead of the consumer, into ``box`` (bounded): gRPC
        receives the next one only while a read is pending, so without this the replica's
        next batch would wait until the peer had processed the last. Ends with
        :data:`_END` or the exception that ended the call."""
        item: Any = _END
        try:
            for msg in self._responses:
                if not self._offer(box, msg):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            item = exc
        self._offer(box, item)

    def _offer(self, box: queue.Queue[Any], item: Any) -> bool:
        while not self._closed.is_set():
            try:
                box.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _next(self) -> Any:
        """The replica's next message, or :data:`_END`; raises what ended the call, or
        :class:`_Stalled` (after cancelling the call) if nothing came within the deadline."""
        try:
            msg = self._box.get(timeout=self.stall_timeout_s)
        except queue.Empty:
            self._responses.cancel()
            raise _Stalled() from None
        if isinstance(msg, BaseException):
            raise msg
        return msg

    def _frames(self) -> Generator[bytes, None, None]:
        """Each ENTRIES message until COMPLETE (acks flushed before each wait)."""
        try:
            while True:
                self.flush()
                try:
                    msg = self._next()
                except _Stalled:
                    raise ReplayInterruptedError(
                        f"replica {self.node or self.address} sent nothing for"
                        f" {self.stall_timeout_s:g} s in the replay of {self.peer} (after txlog"
                        f" offset {self.last_offset}): given up as unreachable", self.address,
                        self.last_offset) from None
                if msg is _END:
                    break
                tag = msg[:1]
                if tag == ENTRIES:
                    self.streaming_entries = True
                    batch_no, at_start, unacked = _META.unpack_from(msg, 1)
                    self.batches = max(self.batches, batch_no)
                    self.max_unacked = max(self.max_unacked, unacked)
                    self.max_unacked_at_batch_start = max(self.max_unacked_at_batch_start,
                                                          at_start)
                    yield msg
                elif tag == WAITING:
                    self.waiting = json.loads(msg[1:])
                elif tag == COMPLETE:
                    self.streaming_entries = True
                    self.complete = json.loads(msg[1:])
                    break  # the replica keeps the stream open until we close our side
            if self.complete is None and not self._closed.is_set():
                raise ReplayInterruptedError(
                    f"replica {self.address} ended the replay of {self.peer} before it was "
                    f"complete (after txlog offset {self.last_offset})", self.address,
                    self.last_offset)
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        finally:
            self._finish()

    def _finish(self) -> None:
        self._streaming = False
        self._out.put(None)  # ends the request stream (frees gRPC's sending thread)

    def _error(self, exc: grpc.RpcError) -> ReplayError:
        trailing = dict(exc.trailing_metadata() or ())  # type: ignore[attr-defined]
        details = exc.details() if hasattr(exc, "details") else str(exc)
        cls = REPLAY_ERRORS.get(str(trailing.get(ERROR_KEY, "")))
        if cls is not None:
            return cls(details)
        if self._closed.is_set():
            return ReplayError(f"replay of {self.peer} closed")
        code = exc.code().name if hasattr(exc, "code") else "?"
        return ReplayInterruptedError(
            f"replica {self.node or self.address} stopped the replay of {self.peer} after "
            f"txlog offset {self.last_offset}: {code} {details}", self.address,
            self.last_offset)

    def close(self, release: bool = True) -> None:
        """Stop the stream and the keepalive; ``release`` also drops the pin (else it
        expires after its lease unless something else renews it)."""
        self._closed.set()
        if self._streaming:
            self._responses.cancel()
        self._finish()
        renewer = getattr(self, "_renewer", None)
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(10.0)  # not left inside a gRPC call when the process exits
        if release and getattr(self, "pin", None):
            try:
                self._call_json(self.address, "Unpin", {"pin": self.pin}, 5.0)
            except grpc.RpcError as exc:
                log.debug("unpin %s on %s failed: %s", self.pin, self.address, exc.code())

    def __enter__(self) -> "ReplayStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
