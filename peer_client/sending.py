"""The send side of a peer: send, post and publish.

:class:`Sender` is the hot path. The common case (durability ``log``, recipient not up,
nothing queued for it) encodes the Send and appends it without building any intermediate
object; what it calls per message is bound once, at construction.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from time import perf_counter, time_ns
from typing import Any

from tidemark.log.exceptions import DeliveryError, OversizedMessageError
from tidemark.log.wire import SendEncoder
from tidemark.peer_client.context import RUNNING, Phase
from tidemark.peer_client.delivery import Delivery
from tidemark.peer_client.directory import DirectoryCache, PeerEntry
from tidemark.peer_client.exceptions import (
    PeerStateError,
    PeerUnreachableError,
    WrongEnvironmentError,
)
from tidemark.peer_client.flight import FlightControl
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.latency import SAMPLE_EVERY, Latencies
from tidemark.peer_client.messages import _BY_CLASS, MessageType, message_type_of
from tidemark.peer_client.options import LEVELS
from tidemark.peer_client.outbox import Outbox, OutItem
from tidemark.peer_client.serializers import ENCODE_ERRORS

__all__ = ["Sender", "POST_CHUNK"]

#: Messages :meth:`Sender.post_many` decides, encodes and takes flight slots for at once.
POST_CHUNK = 1000


class Sender:
    """send / post / publish: checks, message ids, encoding, the flight window, and the
    hand-over to the :class:`~tidemark.peer_client.outbox.Outbox`. The peer's phase is read
    from ``inbox``, recipients from ``directory`` (``dir_lock`` guards its iteration)."""

    def __init__(self, peer_id: str, environment: str, incarnation: str, max_bytes: int, *,
                 inbox: Inbox, directory: DirectoryCache, dir_lock: threading.Lock,
                 outbox: Outbox, flight: FlightControl, send_encoder: SendEncoder,
                 dead_after_ms: int, clock_ms: Callable[[], int], stats: Any,
                 latencies: Latencies | None = None, wall_clock: bool = False) -> None:
        self.peer_id, self.environment, self.max_bytes = peer_id, environment, max_bytes
        #: the sampled send latencies (one send in SAMPLE_EVERY is timed)
        self.latencies = latencies or Latencies()
        self.inbox, self.directory, self.dir_lock = inbox, directory, dir_lock
        self.outbox, self.flight = outbox, flight
        self.dead_after_ms, self.clock_ms, self.stats = dead_after_ms, clock_ms, stats
        self.sent = 0  # sends accepted (a plain counter: the hot path avoids the Counter)
        self._seq = itertools.count(1)
        self._id_prefix = f"{incarnation}-"
        # the hot path's calls, bound once
        self._entry_of = directory.get
        self._busy = outbox.lanes.busy
        self._encode_send = send_encoder.encode
        self._send_encoder = send_encoder
        #: per message type's wire name: (the type, its bound Send encoder)
        self._bound: dict[str, tuple[MessageType, Callable[[Any, str, str, int], bytes]]] = {}
        self._append_fast = outbox.append_fast
        #: ``clock_ms`` is the system's wall clock: post reads it inline (a call fewer)
        self._wall_ns = time_ns if wall_clock else None
        self._serve = outbox.serve_now
        #: posts appended by :attr:`_append_fast` (the outbox counts the others)
        self.posted_fast = 0
        self._acquire = flight.acquire
        self._append_now = outbox.append_now
        self._stable_callback = outbox.stable_callback
        self._detours = outbox.detours  # recipients whose unmarked appends are tracked
        self._entries_get = directory.entries_get  # dict lookups, no Python frame
        self._foreign = directory.foreign_ids
        self._lanes = outbox.lanes.busy_keys
        self._types_get = _BY_CLASS.get
        # bound once: a bound method made per call would be one more object per message
        self._posted_cb = flight.releaser(self._post_error)
        self._release = self._release_flight
        self._post_lock = threading.Lock()
        self._post_failed = 0
        self._post_first_error: str | None = None

    def _check_running(self) -> None:
        phase = self.inbox.phase
        if phase not in RUNNING:
            raise PeerStateError(f"peer {self.peer_id} is {phase.value}: start it first"
                                 if phase is Phase.CREATED else
                                 f"peer {self.peer_id} is {phase.value}")

    def _alive(self, entry: PeerEntry | None, now: int) -> bool:
        return (entry is not None and bool(entry.endpoint)
                and entry.alive(now, self.dead_after_ms)
                and self.outbox.reachable(entry.peer_id))

    def _release_flight(self, _: Delivery) -> None:
        self.flight.release()

    def _prepare(self, message: Any, durability: str) -> tuple[MessageType, bytes]:
        if self.inbox.phase not in RUNNING:
            self._check_running()
        if durability not in LEVELS:
            raise ValueError(f"durability must be one of {', '.join(LEVELS)}, got {durability!r}")
        mt = message_type_of(message)
        payload = mt.serializer.encode(message)
        if len(payload) > self.max_bytes:
            raise OversizedMessageError(f"{mt.name} payload of {len(payload)} bytes exceeds"
                                        f" max_message_bytes={self.max_bytes}")
        return mt, payload

    def _item(self, to: str, mt: MessageType, payload: bytes, mid: str, ts: int, level: str,
              handle: Delivery, publish: bool, alive: bool | None = None) -> OutItem | None:
        entry = self.directory.get(to)
        if alive is None:
            alive = self._alive(entry, ts)
        logged = mt.persistent and (entry is None or entry.persistent)
        if not logged and not alive:
            if publish:
                return None
            raise PeerUnreachableError(
                f"peer {to} is {'not registered' if entry is None else 'down'}: a"
                f" {'transient' if not mt.persistent else 'non-persistent peer'}"
                f" message can only be delivered directly")
        value = None
        if logged:
            value = self._encode_send(mid, to, mt.name, payload, ts)
            if len(value) > self.max_bytes:
                raise OversizedMessageError(f"Send of {len(value)} bytes exceeds"
                                            f" max_message_bytes={self.max_bytes}")
        direct = None
        if alive:
            direct = {"message_id": mid, "message_type": mt.name, "payload": payload,
                      "timestamp_ms": ts, "persistent": logged}
        return OutItem(value, direct, handle, level, publish and not logged)

    def send(self, to: str, message: Any, durability: str = "log",
             timeout: float | None = None) -> Delivery:
        """Point-to-point: queue ``message`` for ``to``; the returned :class:`Delivery`
        completes once it holds at ``durability`` (``log``, ``quorum`` or ``all``)."""
        out = self._send(to, message, durability, timeout, True)
        assert isinstance(out, Delivery)
        return out

    def post(self, to: str, message: Any, durability: str = "log",
             timeout: float | None = None) -> str:
        """Fire and forget: like :meth:`send` without a handle; returns the message id at
        once. Failures are counted and raised by :meth:`check_posted` (``Peer.flush``).
        No object per message outlives the call, which keeps the garbage collector quiet
        at high rates.

        The lean path (durability ``log``, a persistent type, a recipient that is not up,
        nothing queued or detoured for it) checks, encodes and appends in this one frame;
        anything else takes the general path."""
        mt = self._types_get(type(message))
        # _lean written inline: a call per message is one more frame on the hot path
        if (durability != "log" or mt is None or not mt.persistent or type(to) is not str
                or not to or self.inbox.phase not in RUNNING):
            return self._post_general(to, message, durability, timeout)
        entry = self._entries_get(to)
        if ((entry is not None and (entry.up or not entry.persistent))
                or to in self._foreign or to in self._lanes or to in self._detours):
            return self._post_general(to, message, durability, timeout)
        bound = self._bound.get(mt.name)
        if bound is None or bound[0] is not mt:
            bound = self._bind(mt)
        mid = f"{self._id_prefix}{next(self._seq)}"
        wall = self._wall_ns
        try:
            value = bound[1](message, mid, to,
                             wall() // 1_000_000 if wall is not None else self.clock_ms())
        except ENCODE_ERRORS:  # the general path encodes it again and says why
            return self._post_general(to, message, durability, timeout)
        if len(value) > self.max_bytes:
            return self._post_general(to, message, durability, timeout)  # it raises
        self._acquire(timeout)
        self.sent += 1
        done = self._posted_cb if self.sent % SAMPLE_EVERY else self._timed_post(perf_counter())
        try:  # in C on Kafka; BufferError when the producer is full: append_now waits
            self._append_fast(value, to, -1, done)
        except BufferError:
            self._append_now(to, value, done)
        else:
            self.posted_fast += 1
            if not self.posted_fast & 511:  # serve Kafka's callbacks, as a producer loop does
                self._serve()
        return mid

    def _bind(self, mt: MessageType) -> tuple[MessageType, Callable[[Any, str, str, int], bytes]]:
        """``mt``'s encoder of a whole Send from the message (:meth:`SendEncoder.bind`)."""
        serializer = mt.serializer
        bound = (mt, self._send_encoder.bind(
            mt.name, getattr(serializer, "encode_exact", None) or serializer.encode))
        if len(self._bound) < 10_000:
            self._bound[mt.name] = bound
        return bound

    def _lean(self, to: str, durability: str) -> bool:
        """Whether a persistent message to ``to`` at ``durability`` takes the lean path: level
        ``log``, the peer running, and a recipient that is not up, with nothing queued or
        detoured for it and not registered in another environment."""
        if durability != "log" or type(to) is not str or not to \
                or self.inbox.phase not in RUNNING:
            return False
        entry = self._entries_get(to)
        return not ((entry is not None and (entry.up or not entry.persistent))
                    or to in self._foreign or to in self._lanes or to in self._detours)

    def _post_general(self, to: str, message: Any, durability: str,
                      timeout: float | None) -> str:
        out = self._send(to, message, durability, timeout, False)
        return out if isinstance(out, str) else out.message_id

    def post_many(self, to: str, messages: Iterable[Any], durability: str = "log",
                  timeout: float | None = None) -> list[str]:
        """:meth:`post` each of ``messages`` to ``to``, in order; their ids. On the lean path
        the recipient is decided, the clock read and the flight window taken once per chunk
        of up to :data:`POST_CHUNK` messages; a message that fails its checks (size,
        payload) raises before anything of its chunk is appended (earlier chunks are)."""
        ids: list[str] = []
        batch = list(messages)
        step = min(POST_CHUNK, self.flight.limit)
        for at in range(0, len(batch), step):
            ids.extend(self._post_chunk(to, batch[at:at + step], durability, timeout))
        return ids

    def _post_chunk(self, to: str, chunk: list[Any], durability: str,
                    timeout: float | None) -> list[str]:
        if not self._lean(to, durability):
            return [self.post(to, m, durability, timeout) for m in chunk]
        types_get, bound, seq, prefix = self._types_get, self._bound, self._seq, self._id_prefix
        kinds = [types_get(type(m)) for m in chunk]
        if not all(mt is not None and mt.persistent for mt in kinds):
            return [self.post(to, m, durability, timeout) for m in chunk]
        ts = self.clock_ms()
        ids, values = [], []
        for mt, message in zip(kinds, chunk, strict=True):
            assert mt is not None
            encoder = bound.get(mt.name)
            if encoder is None or encoder[0] is not mt:
                encoder = self._bind(mt)
            mid = f"{prefix}{next(seq)}"
            try:
                value = encoder[1](message, mid, to, ts)
            except ENCODE_ERRORS:
                mt.serializer.encode(message)  # raises the PayloadError that says why
                raise
            if len(value) > self.max_bytes:
                self._refuse_size(mt, mt.serializer.encode(message), value)
            ids.append(mid)
            values.append(value)
        self.flight.acquire_many(len(values), timeout)
        before, self.sent = self.sent, self.sent + len(values)
        if before // SAMPLE_EVERY != self.sent // SAMPLE_EVERY:  # time one of the chunk
            self._append_now(to, values[0], self._timed_post(perf_counter()))
            values = values[1:]
        self.outbox.append_many(to, values, self._posted_cb)
        return ids

    def _refuse_size(self, mt: MessageType, payload: bytes, value: bytes) -> None:
        if len(payload) > self.max_bytes:
            raise OversizedMessageError(f"{mt.name} payload of {len(payload)} bytes exceeds"
                                        f" max_message_bytes={self.max_bytes}")
        raise OversizedMessageError(f"Send of {len(value)} bytes exceeds"
                                    f" max_message_bytes={self.max_bytes}")

    def _send(self, to: str, message: Any, durability: str, timeout: float | None,
              track: bool) -> Delivery | str:
        if self.inbox.phase not in RUNNING:
            self._check_running()
        mt = _BY_CLASS.get(type(message)) or message_type_of(message)
        if durability not in LEVELS:
            raise ValueError(f"durability must be one of {', '.join(LEVELS)},"
                             f" got {durability!r}")
        payload = mt.serializer.encode(message)
        if len(payload) > self.max_bytes:
            raise OversizedMessageError(f"{mt.name} payload of {len(payload)} bytes exceeds"
                                        f" max_message_bytes={self.max_bytes}")
        if type(to) is not str or not to:
            raise ValueError(f"recipient must be a peer id, got {to!r}")
        entry = self._entry_of(to)
        if entry is None and self.directory.foreign_environment(to) is not None:
            raise WrongEnvironmentError(
                f"peer {to} is in environment {self.directory.foreign_environment(to)!r},"
                f" not {self.environment!r}: not sending to it")
        ts = self.clock_ms()
        mid = f"{self._id_prefix}{next(self._seq)}"
        alive = entry is not None and self._alive(entry, ts)  # once: _item takes it
        logged_only = entry is None or (entry.persistent and not alive)
        if logged_only and entry is not None and entry.up and entry.endpoint:
            # up in the directory but not reachable now (a stale heartbeat, a backoff): what
            # takes the log meanwhile must keep its place before the next direct batch
            self.outbox.begin_detour(to)
        if mt.persistent and logged_only and not self._busy(to) and to not in self._detours:
            # the common case without direct delivery: encode and append, nothing queued
            # (at quorum/all the append's delivery report starts the replicas' wait)
            value = self._encode_send(mid, to, mt.name, payload, ts)
            if len(value) > self.max_bytes:
                raise OversizedMessageError(f"Send of {len(value)} bytes exceeds"
                                            f" max_message_bytes={self.max_bytes}")
            self._acquire(timeout)
            self.sent += 1
            sampled = not self.sent % SAMPLE_EVERY
            if durability == "log" and not track:
                self._append_now(to, value, self._timed_post(perf_counter()) if sampled
                                 else self._posted_cb)
                return mid
            handle = Delivery(mid, 1, self._release)
            if sampled:
                self._time(handle, durability)
            self._append_now(to, value, handle if durability == "log"
                             else self._stable_callback(handle, durability))
            return handle if track else mid
        handle = Delivery(mid, 1, self._release)
        item = self._item(to, mt, payload, mid, ts, durability, handle, False, alive)
        assert item is not None
        self._acquire(timeout)
        self.sent += 1
        if not self.sent % SAMPLE_EVERY:
            self._time(handle, durability)
        if item.direct is None:
            self.outbox.put_logged(to, item)
        else:
            self.outbox.put(to, item)
        return handle

    def _time(self, handle: Delivery, durability: str) -> None:
        """Time ``handle`` until its durability level holds (a sampled send)."""
        latency, t0 = self.latencies.by_name[f"send_{durability}"], perf_counter()

        def done(d: Delivery) -> None:
            if d.exception() is None:
                latency.observe(perf_counter() - t0)
        handle.add_done_callback(done)

    def _timed_post(self, t0: float) -> Callable[[Any, Any], None]:
        """The Kafka callback of a sampled :meth:`post`: :attr:`_posted_cb`, then the time
        since ``t0`` when Kafka acknowledged it."""
        latency = self.latencies.by_name["send_log"]

        posted_cb = self._posted_cb

        def posted(err: Any, msg: Any) -> None:
            posted_cb(err, msg)
            if err is None:
                latency.observe(perf_counter() - t0)
        return posted

    def _post_error(self, err: Any, msg: Any) -> None:
        """Count a post Kafka refused (the shared callback, :attr:`_posted_cb`, calls it)."""
        with self._post_lock:
            self._post_failed += 1
            if self._post_first_error is None:
                self._post_first_error = f"{msg.topic()}[{msg.partition()}]: {err.str()}"

    def check_posted(self) -> None:
        """Raise :class:`DeliveryError` for posts Kafka refused since the last check."""
        with self._post_lock:
            failed, first = self._post_failed, self._post_first_error
            self._post_failed, self._post_first_error = 0, None
        if failed:
            raise DeliveryError(f"{failed} posted send(s) not acknowledged by Kafka;"
                                f" first: {first}")

    def publish(self, message: Any, durability: str = "log",
                timeout: float | None = None) -> Delivery:
        """Send ``message`` to every peer whose directory entry subscribes to its type."""
        mt, payload = self._prepare(message, durability)
        ts = self.clock_ms()
        mid = f"{self._id_prefix}{next(self._seq)}"
        with self.dir_lock:
            targets = [e.peer_id for e in self.directory.subscribers(mt.name)]
        handle = Delivery(mid, len(targets) or 1, None)
        items = [(to, self._item(to, mt, payload, mid, ts, durability, handle, True))
                 for to in targets]
        ready = [(to, it) for to, it in items if it is not None]
        self.flight.acquire(timeout)
        handle.arm(len(ready), self._release)
        self.stats["published"] += 1
        if not ready:
            handle.part_done(None)
            return handle
        for to, it in ready:
            self.outbox.put(to, it)
        return handle
