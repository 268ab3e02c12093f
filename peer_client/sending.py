"""The send side of the peer core: send, post and publish.

Mixed into :class:`tidemark.peer_client.core.PeerCore`; kept apart because it is the hot path. The
common case (durability ``log``, recipient not up, nothing queued for it) encodes the Send
and appends it without building any intermediate object.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from tidemark.log.exceptions import OversizedMessageError
from tidemark.log.wire import SendEncoder
from tidemark.peer_client.context import Phase
from tidemark.peer_client.delivery import Delivery
from tidemark.peer_client.directory import DirectoryCache, PeerEntry
from tidemark.peer_client.exceptions import PeerUnreachableError, WrongEnvironmentError
from tidemark.peer_client.flight import FlightControl
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.messages import _BY_CLASS, MessageType, message_type_of
from tidemark.peer_client.options import LEVELS
from tidemark.peer_client.outbox import Outbox, OutItem

__all__ = ["Sending"]

#: Phases in which the peer accepts messages and sends.
RUNNING = (Phase.STARTING, Phase.REPLAY, Phase.HANDOVER, Phase.NORMAL)


class Sending:
    """send / post / publish over the state :class:`~tidemark.peer_client.core.PeerCore` holds."""

    peer_id: str
    environment: str
    max_bytes: int
    directory: DirectoryCache
    dir_lock: threading.Lock
    flight: FlightControl
    outbox: Outbox
    inbox: Inbox
    stats: Any
    sent: int
    clock_ms: Callable[[], int]
    _seq: itertools.count[int]
    _id_prefix: str
    _send_encoder: SendEncoder
    _ack_lock: threading.Lock
    _post_failed: int
    _post_first_error: str | None
    _posted_cb: Callable[[Any, Any], None]
    _release: Callable[[Delivery], None]

    def _check_running(self) -> None:
        raise NotImplementedError

    def _alive(self, entry: PeerEntry | None, now: int) -> bool:
        raise NotImplementedError

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
              handle: Delivery, publish: bool) -> OutItem | None:
        entry = self.directory.get(to)
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
            value = self._send_encoder.encode(mid, to, mt.name, payload, ts)
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
        at high rates."""
        out = self._send(to, message, durability, timeout, False)
        return out if isinstance(out, str) else out.message_id

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
        entry = self.directory.get(to)
        if entry is None and self.directory.foreign_environment(to) is not None:
            raise WrongEnvironmentError(
                f"peer {to} is in environment {self.directory.foreign_environment(to)!r},"
                f" not {self.environment!r}: not sending to it")
        ts = self.clock_ms()
        mid = f"{self._id_prefix}{next(self._seq)}"
        if (durability == "log" and mt.persistent and not self.outbox.lanes.busy(to)
                and (entry is None or (entry.persistent and not self._alive(entry, ts)))):
            # the common case without direct delivery: encode and append, nothing queued
            value = self._send_encoder.encode(mid, to, mt.name, payload, ts)
            if len(value) > self.max_bytes:
                raise OversizedMessageError(f"Send of {len(value)} bytes exceeds"
                                            f" max_message_bytes={self.max_bytes}")
            self.flight.acquire(timeout)
            self.sent += 1
            if not track:
                self.outbox.append_now(to, value, self._posted_cb)
                return mid
            handle = Delivery(mid, 1, self._release)
            self.outbox.append_now(to, value, handle)
            return handle
        handle = Delivery(mid, 1, self._release)
        item = self._item(to, mt, payload, mid, ts, durability, handle, False)
        assert item is not None
        self.flight.acquire(timeout)
        self.sent += 1
        if item.direct is None:
            self.outbox.put_logged(to, item)
        else:
            self.outbox.put(to, item)
        return handle

    def _posted(self, err: Any, msg: Any) -> None:
        """The shared Kafka callback of :meth:`post`."""
        if err is not None:
            with self._ack_lock:
                self._post_failed += 1
                if self._post_first_error is None:
                    self._post_first_error = (f"{msg.topic()}[{msg.partition()}]: "
                                              f"{err.str()}")
        self.flight.release()

    def check_posted(self) -> None:
        """Raise :class:`DeliveryError` for posts Kafka refused since the last check."""
        with self._ack_lock:
            failed, first = self._post_failed, self._post_first_error
            self._post_failed, self._post_first_error = 0, None
        if failed:
            from tidemark.log.exceptions import DeliveryError
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
