"""The handle a ``send_nowait`` or ``publish_nowait`` returns: :class:`Delivery`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tidemark.peer_client.exceptions import DurabilityTimeoutError

__all__ = ["Delivery"]

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
            from tidemark.log.exceptions import DeliveryError
            self.part_done(DeliveryError(f"Kafka did not acknowledge the Send of"
                                         f" {self.message_id} to {msg.topic()}"
                                         f"[{msg.partition()}]: {err.str()}"))

    kafka_done = __call__

    def logged_at(self, partition: int, offset: int) -> None:
        """Record that Kafka put one Send at txlog ``partition``/``offset`` (before a
        quorum/all wait)."""
        positions = self.positions
        if positions is None:
            self.positions = [(partition, offset)]
        else:
            positions.append((partition, offset))

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
