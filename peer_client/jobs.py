"""Handler jobs: what a worker of the executor runs for accepted messages.

A :class:`Job` runs one handler and then calls its ``finish`` (ack, or record the failure).
A :class:`RunJob` runs one sender's run of plain handlers in order (replay delivers in
batches) and finishes them together. Both are built by :class:`peer_client.inbox.Inbox`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from peer_client.context import MessageContext
from peer_client.handlers import Handler
from peer_client.records import Envelope

__all__ = ["Job", "RunJob"]


class Job:
    """One handler invocation; ``finish`` acks or records the failure."""

    __slots__ = ("env", "handler", "message", "ctx", "_finish")

    def __init__(self, env: Envelope, handler: Handler, message: Any, peer_id: str,
                 finish: Callable[["Job", BaseException | None], None]) -> None:
        self.env = env
        self.handler = handler
        self.message = message
        self.ctx = MessageContext(env, peer_id)
        self._finish = finish

    @property
    def is_async(self) -> bool:
        """Whether the handler is ``async def``."""
        return self.handler.is_async

    def run(self) -> None:
        """Run a plain handler and finish."""
        h = self.handler
        try:
            if h.takes_context:
                h.fn(self.message, self.ctx)
            else:
                h.fn(self.message)
        except Exception as exc:  # noqa: BLE001 - a handler failure is recorded, not fatal
            self._finish(self, exc)
            return
        self._finish(self, None)

    async def run_async(self) -> None:
        """Run an ``async def`` handler and finish."""
        h = self.handler
        try:
            if h.takes_context:
                await h.fn(self.message, self.ctx)
            else:
                await h.fn(self.message)
        except Exception as exc:  # noqa: BLE001
            self._finish(self, exc)
            return
        self._finish(self, None)


class RunJob:
    """One sender's run of plain (not ``async def``) handlers, run in order by one worker and
    finished together: one slot release and one ack batch for the run, no lane handoff per
    message. ``after_each`` (the persisted dedup store's record, or None) runs as soon as a
    handler returned, as for a single :class:`Job`, so a crash mid-run cannot let a handled
    message be handled again; ``done(ok, failed)`` then acks and reports."""

    __slots__ = ("items", "peer_id", "_after_each", "_done")
    is_async = False

    def __init__(self, items: list[tuple[Envelope, Handler, Any]], peer_id: str,
                 after_each: Callable[[Envelope], None] | None,
                 done: Callable[[list[Envelope], list[tuple[Envelope, BaseException]]], None]
                 ) -> None:
        self.items, self.peer_id = items, peer_id
        self._after_each, self._done = after_each, done

    def run(self) -> None:
        """Run each handler in order, then finish the run."""
        peer_id, after_each = self.peer_id, self._after_each
        ok: list[Envelope] = []
        failed: list[tuple[Envelope, BaseException]] = []
        for env, h, message in self.items:
            try:
                if h.takes_context:
                    h.fn(message, MessageContext(env, peer_id))
                else:
                    h.fn(message)
            except Exception as exc:  # noqa: BLE001 - a handler failure is recorded, not fatal
                failed.append((env, exc))
                continue
            if after_each is not None:
                after_each(env)
            ok.append(env)
        self._done(ok, failed)
