"""The send side: per-recipient lanes that deliver directly, then append to txlog.

For one recipient everything goes through one FIFO lane, so txlog (and so replay) sees the
sender's messages in send order. A run of messages for a recipient that is up is delivered
directly in one batch; the recipient's receipt names the incarnation that accepted it, and
each persistent message is then appended to txlog marked with that incarnation
(``Send.direct_incarnation``), or unmarked when the direct call failed. Messages for a peer
that is down go to txlog at once. A failed direct call never fails a persistent send.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidemark.log.wire import mark_direct
from tidemark.peer_client.delivery import Delivery
from tidemark.peer_client.exceptions import PeerUnreachableError, WrongEnvironmentError
from tidemark.peer_client.lanes import KeyedLanes
from tidemark.peer_client.options import LOG
from tidemark.peer_client.ports import DirectPort, LogPort, StabilityPort
from tidemark.peer_client.records import peer_codec

__all__ = ["OutItem", "Outbox"]

log = logging.getLogger("peer_client.outbox")


@dataclass(slots=True)
class OutItem:
    """One message for one recipient."""

    value: bytes | None          #: the encoded Send (persistent), or None (direct only)
    direct: dict[str, Any] | None  #: the DirectMessage when the recipient is up, else None
    handle: Delivery
    level: str
    best_effort: bool = False    #: transient publish: an unreachable subscriber is no error


class Outbox:
    """Per-recipient lanes over a direct port and a log port."""

    def __init__(self, peer_id: str, incarnation: str, nonce: str, environment: str,
                 log_port: LogPort,
                 direct: DirectPort, stability: StabilityPort | None, batch: int,
                 backoff_ms: int, max_bytes: int, stats: dict[str, int],
                 endpoint_of: Callable[[str], str | None], batch_bytes: int = 4 << 20) -> None:
        self.peer_id, self.incarnation, self.environment = peer_id, incarnation, environment
        self.nonce = nonce  # proves the incarnation is this peer's (peer_client.incarnation)
        self.log, self.direct, self.stability = log_port, direct, stability
        self.batch, self.backoff_ms, self.max_bytes = batch, backoff_ms, max_bytes
        self.batch_bytes = batch_bytes  # payload bytes per direct call (one message at least)
        self.stats = stats
        self.endpoint_of = endpoint_of
        self.lanes: KeyedLanes[OutItem] = KeyedLanes()
        self.lock = threading.Lock()
        self.unreachable: dict[str, float] = {}
        #: recipient: [unmarked appends not confirmed yet, highest confirmed offset] since a
        #: direct call to it failed. While some are unconfirmed its messages go through the
        #: log too; the next direct batch carries the offset as ``log_floor``, and the
        #: recipient handles it only once its follower has dispatched the log that far
        self.detours: dict[str, list[int]] = {}
        self.logged = 0
        self.served = 0  # times the sending thread served delivery callbacks itself
        appender = getattr(log_port, "appender", None)
        #: ``(value, key, -1, callback)``: the send path's append, which the Kafka port does
        #: in C; ``BufferError`` when the producer is full (then :meth:`append_now` waits)
        self.append_fast: Callable[[bytes, str, int, Any], None] = (
            appender() if appender is not None else self._append_port)
        self._codec = peer_codec()

    # ---- entry -------------------------------------------------------------------------
    def reachable(self, peer_id: str) -> bool:
        """False while ``peer_id`` is in its backoff after a failed direct call, or while
        messages that took the log since are not confirmed (their offsets are unknown)."""
        detour = self.detours.get(peer_id)
        if detour is not None and detour[0] > 0:
            return False
        until = self.unreachable.get(peer_id)
        if until is None:
            return True
        if time.monotonic() >= until:
            self.unreachable.pop(peer_id, None)
            return True
        return False

    def _append_port(self, value: bytes, to: str, _partition: int, callback: Any) -> None:
        self.log.append(to, value, callback)

    def serve_now(self) -> None:
        """Serve delivery callbacks on the sending thread (the send path, every 512 sends)."""
        self.log.serve()
        self.served += 1

    def append_now(self, to: str, value: bytes, callback: Any) -> None:
        """The send fast path: append a Send that waits for nothing (see :meth:`put_logged`).
        Every 512 appends the sending thread serves delivery callbacks itself, as a producer
        loop does, instead of leaving them all to the housekeeping thread."""
        self.log.append(to, value, callback)
        self.logged += 1
        if not self.logged & 511:
            self.log.serve()
            self.served += 1

    def append_many(self, to: str, values: list[bytes], callback: Any) -> None:
        """:meth:`append_now` for a list to one recipient (``post_many``)."""
        self.log.append_many(to, values, callback)
        before, self.logged = self.logged, self.logged + len(values)
        if before >> 9 != self.logged >> 9:
            self.log.serve()
            self.served += 1

    def put_logged(self, to: str, item: OutItem) -> None:
        """A persistent message for a peer that is not up: append it now, unless earlier
        messages for ``to`` are still queued (then behind them, to keep send order). The
        check needs no lock: a lane this thread filled stays busy until it is drained."""
        if not self.lanes.busy(to):
            self._append(to, item, None)
        else:
            self.put(to, item)

    def put(self, to: str, item: OutItem) -> None:
        """Queue ``item`` for ``to``; runs the lane now if it was idle."""
        with self.lock:
            start = self.lanes.push(to, item)
        if start:
            self._drive(to, [item] + self._take(to))

    # ---- lane machinery ----------------------------------------------------------------
    def _take(self, to: str) -> list[OutItem]:
        with self.lock:
            return self.lanes.take(to, self.batch - 1)

    def _next_chunk(self, to: str) -> list[OutItem] | None:
        with self.lock:
            nxt = self.lanes.next(to)
            if nxt is None:
                return None
            return [nxt] + self.lanes.take(to, self.batch - 1)

    def _drive(self, to: str, items: list[OutItem] | None) -> None:
        """Work through a lane; returns when it is idle or waiting for a direct receipt."""
        while items is not None:
            i = 0
            while i < len(items) and items[i].direct is None:
                self._append(to, items[i], None)
                i += 1
            if i < len(items):
                j, size, limit = i, 0, self.batch_bytes
                while j < len(items) and items[j].direct is not None:
                    size += len(items[j].direct["payload"])  # type: ignore[index]
                    if size > limit and j > i:
                        break
                    j += 1
                group, rest = items[i:j], items[j:]
                detour = self.detours.get(to)
                if detour is not None and detour[0] > 0:
                    # earlier messages took the log and are not confirmed yet: these follow
                    # them there, or a direct copy could be handled first
                    self._finish_group(to, group, None, PeerUnreachableError(
                        f"messages to {to} are on their way to the log"), backoff=False)
                    items = rest
                    continue
                result = self._deliver(to, group, rest)
                if result is None:
                    return  # the receipt's callback continues this lane
                self._finish_group(to, group, *result)
                items = rest
                continue
            items = self._next_chunk(to)

    def _deliver(self, to: str, group: list[OutItem], rest: list[OutItem]
                 ) -> tuple[Any, BaseException | None] | None:
        endpoint = self.endpoint_of(to)
        if endpoint is None:
            return None, PeerUnreachableError(f"peer {to} has no endpoint")
        floor = -1
        detour = self.detours.get(to)
        if detour is not None:
            with self.lock:
                floor = detour[1]
                del self.detours[to]
        batch = self._codec.encode("DirectBatch", {
            "sender": self.peer_id, "sender_incarnation": self.incarnation, "recipient": to,
            "environment": self.environment, "messages": [it.direct for it in group],
            "sender_nonce": self.nonce, "log_floor": floor})
        state: dict[str, Any] = {"sync": True, "result": None}
        guard = threading.Lock()

        def done(receipt: Any, error: BaseException | None) -> None:
            with guard:
                if state["sync"]:
                    state["result"] = (receipt, error)
                    return
            self._finish_group(to, group, receipt, error)
            self._drive(to, rest)

        try:
            self.direct.deliver(endpoint, batch, done)
        except Exception as exc:  # noqa: BLE001 - a port that fails at once
            with guard:
                if state["result"] is None:
                    state["result"] = (None, exc)
        with guard:
            state["sync"] = False
            return state["result"]

    def _finish_group(self, to: str, group: list[OutItem], receipt: Any,
                      error: BaseException | None, backoff: bool = True) -> None:
        inc: str | None = None
        if error is None and receipt is not None and not receipt.get("error"):
            inc = receipt["incarnation"]
            self.stats["direct_delivered"] += len(group)
        else:
            why = str(error) if error is not None else receipt.get("error", "")
            kind = "" if receipt is None else receipt.get("error_kind", "")
            if kind == "environment":
                error = WrongEnvironmentError(why)
            elif error is None or not isinstance(error, PeerUnreachableError):
                error = PeerUnreachableError(f"direct delivery to {to} failed: {why}")
            if backoff:
                self.unreachable[to] = time.monotonic() + self.backoff_ms / 1000
            with self.lock:
                if to not in self.detours:
                    self.detours[to] = [0, -1]
            self.stats["direct_failed"] += len(group)
            log.debug("direct delivery of %d message(s) to %s failed: %s", len(group), to, why)
        for it in group:
            if it.value is not None:
                self._append(to, it, inc)
            elif inc is not None or it.best_effort:
                it.handle.part_done(None)
            else:
                it.handle.part_done(error)

    def _append(self, to: str, item: OutItem, incarnation: str | None) -> None:
        value = item.value
        assert value is not None
        if incarnation is not None:
            marked = mark_direct(value, incarnation)
            if len(marked) <= self.max_bytes:
                value = marked
        handle = item.handle
        callback: Callable[[Any, Any], None] = (
            handle if item.level == LOG else self.stable_callback(handle, item.level))
        detour = None
        if incarnation is None and to in self.detours:
            callback, detour = self._detour_callback(to, callback)
        try:
            self.log.append(to, value, callback)
        except Exception as exc:  # noqa: BLE001 - refused before Kafka (size, config)
            if detour is not None:
                with self.lock:
                    detour[0] -= 1  # no report will come for it
            handle.part_done(exc)
            return
        self.logged += 1

    def begin_detour(self, to: str) -> None:
        """Track the unmarked appends to ``to`` from now on (see :attr:`detours`): it is up
        in the directory but not reachable directly at the moment."""
        if to not in self.detours:
            with self.lock:
                self.detours.setdefault(to, [0, -1])

    def _detour_callback(self, to: str, callback: Callable[[Any, Any], None]
                         ) -> tuple[Callable[[Any, Any], None], list[int]]:
        """Count an unmarked append to ``to`` until Kafka confirms it (see :attr:`detours`)."""
        with self.lock:
            detour = self.detours.setdefault(to, [0, -1])
            detour[0] += 1

        def on_delivery(err: Any, msg: Any) -> None:
            with self.lock:
                detour[0] -= 1
                if err is None and msg.offset() is not None and msg.offset() > detour[1]:
                    detour[1] = msg.offset()
            callback(err, msg)
        return on_delivery, detour

    def stable_callback(self, handle: Delivery, level: str) -> Callable[[Any, Any], None]:
        """The delivery callback of a Send at durability ``level`` (quorum or all): once
        Kafka acknowledged it, ``handle`` waits for the replicas (:attr:`stability`)."""
        stability = self.stability
        wait = stability.wait if stability is not None else None

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                handle.kafka_done(err, msg)
                return
            if wait is None:
                from tidemark.peer_client.exceptions import DurabilityUnavailableError
                handle.part_done(DurabilityUnavailableError(
                    f"durability {level!r} needs the replica nodes; none configured"))
                return
            k, offset = msg.partition(), msg.offset()
            handle.logged_at(k, offset)
            wait(level, k, offset, handle.part_done)
        return on_delivery

    def pending(self) -> int:
        """Messages queued behind a running lane."""
        return self.lanes.pending
