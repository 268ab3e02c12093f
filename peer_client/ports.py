"""What the peer core needs from the outside world, and the handle a send returns.

The core is the same for the real peer (Kafka, gRPC, replica nodes, threads) and for the
in-memory test double; only these ports differ. Every port is callback-based so that it can
complete synchronously (in memory) or later on another thread (Kafka, gRPC).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from peer_client.exceptions import DurabilityTimeoutError

__all__ = ["Delivery", "LogPort", "DirectPort", "DirectoryPort", "StabilityPort", "Executor",
           "KafkaCallback", "DirectCallback"]

#: ``(error or None, message with .partition() and .offset())`` as confluent-kafka calls it.
KafkaCallback = Callable[[Any, Any], None]
#: ``(receipt record or None, error or None)``.
DirectCallback = Callable[[dict[str, Any] | None, BaseException | None], None]

_LOCK = threading.Lock()


class Delivery:
    """The pending result of one ``send`` or ``publish``: done once every recipient's Send
    holds at the requested durability level (or failed)."""

    __slots__ = ("message_id", "_remaining", "_error", "_done", "_event", "_callbacks",
                 "_on_final", "positions")

    def __init__(self, message_id: str, parts: int,
                 on_final: Callable[["Delivery"], None] | None = None) -> None:
        self.message_id = message_id
        #: ``(txlog partition, offset)`` of each Send Kafka acknowledged (persistent only).
        self.positions: list[tuple[int, int]] | None = None
        self._remaining = parts
        self._error: BaseException | None = None
        self._done = False
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[["Delivery"], None]] | None = None
        self._on_final = on_final
        if parts <= 0:
            self._remaining = 1
            self.part_done(None)

    def arm(self, parts: int, on_final: Callable[["Delivery"], None]) -> None:
        """Set the number of parts and the final callback once they are known (``publish``
        builds its recipients' items with the handle first). Before any part is done."""
        with _LOCK:
            self._remaining, self._on_final = max(1, parts), on_final

    def part_done(self, error: BaseException | None) -> None:
        """One recipient's part finished (``error`` None: it holds)."""
        with _LOCK:
            if self._done:
                return
            if error is not None and self._error is None:
                self._error = error
            self._remaining -= 1
            if self._remaining:
                return
            self._done = True
            event, callbacks = self._event, self._callbacks
        final = self._on_final
        if final is not None:
            final(self)
        if event is not None:
            event.set()
        if callbacks:
            for cb in callbacks:
                cb(self)

    def __call__(self, err: Any, msg: Any) -> None:
        """A confluent-kafka delivery callback completing one part at durability ``log``
        (the handle is its own callback: one object per send, not two)."""
        if err is None:
            if self.positions is None:
                self.positions = [(msg.partition(), msg.offset())]
            else:
                self.positions.append((msg.partition(), msg.offset()))
            self.part_done(None)
        else:
            from log.exceptions import DeliveryError
            self.part_done(DeliveryError(f"Kafka did not acknowledge the Send of"
                                         f" {self.message_id} to {msg.topic()}"
                                         f"[{msg.partition()}]: {err.str()}"))

    kafka_done = __call__

    def logged(self, msg: Any) -> None:
        """Record where Kafka put one Send (before a quorum/all wait)."""
        if self.positions is None:
            self.positions = []
        self.positions.append((msg.partition(), msg.offset()))

    def fail(self, error: BaseException) -> None:
        """Fail every remaining part."""
        with _LOCK:
            if self._done:
                return
            self._remaining = 1
        self.part_done(error)

    def done(self) -> bool:
        """Whether the send finished (successfully or not)."""
        return self._done

    def exception(self) -> BaseException | None:
        """The first failure, once done."""
        return self._error

    def add_done_callback(self, fn: Callable[["Delivery"], None]) -> None:
        """Call ``fn(self)`` when done (at once if already done)."""
        with _LOCK:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done; False at the deadline."""
        with _LOCK:
            if self._done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def result(self, timeout: float | None = None) -> str:
        """The message id once the durability level holds; raises the failure otherwise."""
        if not self.wait(timeout):
            raise DurabilityTimeoutError(f"send of {self.message_id} not confirmed within"
                                         f" {timeout}s")
        if self._error is not None:
            raise self._error
        return self.message_id

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "done")
        return f"<Delivery {self.message_id} {state}>"


class LogPort(Protocol):
    """Appends encoded records to txlog (key = the peer the record is about)."""

    def append(self, key: str, value: bytes, on_delivery: KafkaCallback | None = None) -> None:
        """Append one record; ``on_delivery`` fires once Kafka acknowledged or refused it."""

    def flush(self, timeout: float) -> None:
        """Wait for every appended record (raises if one was refused)."""

    def serve(self) -> None:
        """Run pending completion callbacks now, if the port queues them."""


class DirectPort(Protocol):
    """Direct delivery to other peers."""

    def deliver(self, endpoint: str, batch: bytes, done: DirectCallback) -> None:
        """Send one encoded DirectBatch; ``done`` gets the decoded DirectReceipt."""


class DirectoryPort(Protocol):
    """Writes this peer's PeerDescriptor to the directory."""

    def publish(self, peer_id: str, descriptor: dict[str, Any],
                on_delivery: KafkaCallback | None = None) -> None:
        """Append (or replace) the descriptor of ``peer_id``."""


class StabilityPort(Protocol):
    """Answers durability ``quorum`` and ``all`` (the replica nodes)."""

    def wait(self, level: str, partition: int, offset: int,
             done: Callable[[BaseException | None], None]) -> None:
        """Call ``done(None)`` once txlog ``partition`` at ``offset`` holds at ``level``,
        or ``done(error)`` (e.g. :class:`DurabilityTimeoutError` naming the partition)."""


class Executor(Protocol):
    """Runs handler jobs, one at a time per key (the sender), in order."""

    def submit(self, key: str, job: Any) -> None:
        """Queue ``job`` (a :class:`peer_client.inbox.Job`) behind earlier jobs of ``key``."""

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted job finished; False at the deadline."""

    def close(self) -> None:
        """Stop the workers."""
