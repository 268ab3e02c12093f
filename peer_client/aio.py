"""``AsyncPeer``: the asyncio counterpart of :class:`~tidemark.peer_client.Peer`, on the same core.

    async with AsyncPeer("billing", "prod", settings) as peer:
        @peer.handler
        async def on_order(msg: OrderPlaced, ctx: MessageContext) -> None: ...
        await peer.send("shipping", OrderShipped(...))

``async def`` handlers run on the loop that entered the peer; plain functions run on the
worker pool. Start and stop (Kafka reads, draining) run in the loop's default executor, so
the loop stays free. Sends never block the loop: a full flight window is waited for in an
executor thread (or raises in fail mode).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from tidemark.log.settings import Settings
from tidemark.peer_client.context import Phase
from tidemark.peer_client.delivery import Delivery
from tidemark.peer_client.exceptions import FlightSizeExceededError
from tidemark.peer_client.flight import RAISE
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.peer import Peer, Replayer
from tidemark.peer_client.ports import StabilityPort

__all__ = ["AsyncPeer", "wait_delivery"]


async def wait_delivery(handle: Delivery, timeout: float | None = None) -> str:
    """Await a :class:`Delivery`: the message id, or its failure."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not fut.done():
            fut.set_result(None)

    def done(_: Delivery) -> None:
        loop.call_soon_threadsafe(settle)
    handle.add_done_callback(done)
    await asyncio.wait_for(fut, timeout)
    return handle.result(0)


class AsyncPeer:
    """A peer for asyncio programs; ``async with AsyncPeer(...) as peer``."""

    def __init__(self, peer_id: str, environment: str | None = None,
                 settings: Settings | None = None, options: PeerOptions | None = None, *,
                 stability: StabilityPort | None = None, replayer: Replayer | None = None
                 ) -> None:
        self.sync = Peer(peer_id, environment, settings, options, stability=stability,
                         replayer=replayer)
        self._core = self.sync._core

    def __getattr__(self, name: str) -> Any:  # endpoint, stats, status, ...
        return getattr(self.sync, name)

    @property
    def peer_id(self) -> str:
        """The peer's id."""
        return self.sync.peer_id

    @property
    def incarnation(self) -> str:
        """This run's incarnation id."""
        return self.sync.incarnation

    @property
    def phase(self) -> Phase:
        """Where the peer is in its life."""
        return self.sync.phase

    def handler(self, fn_or_cls: Any = None, *, backoff: Sequence[float] = ()) -> Any:
        """Register a handler (``async def`` or plain); see :meth:`Peer.handler`."""
        return self._core.handler(fn_or_cls, backoff=backoff)

    def batch_handler(self, fn_or_cls: Any = None, *, backoff: Sequence[float] = ()) -> Any:
        """Register a batch handler; see :meth:`Peer.batch_handler`."""
        return self._core.batch_handler(fn_or_cls, backoff=backoff)

    async def start(self) -> "AsyncPeer":
        """Start on the running loop (which then runs the ``async def`` handlers)."""
        loop = asyncio.get_running_loop()
        self.sync._wiring.executor.set_loop(loop)
        await loop.run_in_executor(None, self.sync.start)
        return self

    async def stop(self) -> None:
        """Stop (see :meth:`Peer.stop`) without blocking the loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.sync.stop)

    async def __aenter__(self) -> "AsyncPeer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _submit(self, fn: Any, *args: Any) -> Delivery:
        try:
            return fn(*args, 0.0)
        except FlightSizeExceededError:
            if self._core.flight.mode == RAISE:
                raise
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args, None)

    async def send(self, to: str, message: Any, durability: str = "log",
                   timeout: float | None = None) -> str:
        """Send; returns the message id once ``durability`` holds."""
        handle = await self._submit(self._core.send, to, message, durability)
        return await wait_delivery(handle, timeout)

    async def send_nowait(self, to: str, message: Any, durability: str = "log") -> Delivery:
        """Queue a send (waits only for room in the flight window)."""
        return await self._submit(self._core.send, to, message, durability)

    async def post(self, to: str, message: Any, durability: str = "log") -> str:
        """Fire and forget (see :meth:`Peer.post`); waits only for room in the flight window."""
        try:
            return self._core.post(to, message, durability, 0.0)
        except FlightSizeExceededError:
            if self._core.flight.mode == RAISE:
                raise
        return await asyncio.get_running_loop().run_in_executor(
            None, self._core.post, to, message, durability, None)

    async def post_many(self, to: str, messages: Iterable[Any],
                        durability: str = "log") -> list[str]:
        """Fire and forget a list (see :meth:`Peer.post_many`). In the blocking flight mode
        it runs off the event loop (waiting for room must not stop the loop, and a list
        half-sent when the window filled cannot be retried whole)."""
        batch = list(messages)
        if self._core.flight.mode == RAISE:
            return self._core.post_many(to, batch, durability, 0.0)
        return await asyncio.get_running_loop().run_in_executor(
            None, self._core.post_many, to, batch, durability, None)

    async def publish(self, message: Any, durability: str = "log",
                      timeout: float | None = None) -> str:
        """Publish to every subscriber; returns once ``durability`` holds for all."""
        handle = await self._submit(self._core.publish, message, durability)
        return await wait_delivery(handle, timeout)

    async def publish_nowait(self, message: Any, durability: str = "log") -> Delivery:
        """Queue a publish."""
        return await self._submit(self._core.publish, message, durability)

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every send so far is confirmed (see :meth:`Peer.flush`)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.sync.flush, timeout)
