"""Handler jobs: what a worker of the executor runs for accepted messages.

A :class:`Job` runs one handler and then calls its ``finish`` (ack, or record the failure).
A :class:`RunJob` runs one sender's run of plain handlers in order (replay delivers in
batches) and finishes them together. Both are built by :class:`tidemark.peer_client.inbox.Inbox`.

A batch handler (``Handler.batch``) is called once with the messages of a run that follow each
other and share it, in order, with a :class:`~tidemark.peer_client.context.BatchContext`; a single
:class:`Job` calls it with a list of one. It fails the messages it names in a
:class:`~tidemark.peer_client.exceptions.BatchFailed`, or all of them by raising anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from tidemark.peer_client.columns import ColumnEnvelopes, Columns
from tidemark.peer_client.context import BatchContext, MessageContext
from tidemark.peer_client.exceptions import BatchFailed
from tidemark.peer_client.handlers import Handler
from tidemark.peer_client.records import Envelope

__all__ = ["Job", "RunJob", "ColumnRun", "call_batch", "ABANDONED"]

_Failures = dict[int, BaseException]


class _Abandoned(Exception):
    """The finish of a job that was not run: the peer gave up on queued work."""


#: passed to a :class:`Job`'s ``finish`` instead of an error when it was abandoned
ABANDONED = _Abandoned("abandoned: the peer stopped before this job started")


def _never() -> bool:
    return False


def _failures(exc: BaseException, n: int) -> _Failures:
    """Which of ``n`` messages a batch handler's exception fails."""
    if isinstance(exc, BatchFailed):
        return {i: e for i, e in exc.failures.items() if 0 <= i < n}
    return dict.fromkeys(range(n), exc)


def _invoke(handler: Handler, arg: Any, ctx: Callable[[], object]) -> BaseException | None:
    """Call a plain handler with ``arg`` (a message, or a list for a batch handler) and, if
    it takes one, the context ``ctx()``; its exception, or None."""
    try:
        if handler.takes_context:
            handler.fn(arg, ctx())
        else:
            handler.fn(arg)
    except Exception as exc:  # noqa: BLE001 - a handler failure is recorded, not fatal
        return exc
    return None


async def _invoke_async(handler: Handler, arg: Any, ctx: Callable[[], object]
                        ) -> BaseException | None:
    """:func:`_invoke` for an ``async def`` handler."""
    try:
        if handler.takes_context:
            await handler.fn(arg, ctx())
        else:
            await handler.fn(arg)
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


def call_batch(handler: Handler, messages: list[Any], envs: Sequence[Envelope], peer_id: str
               ) -> _Failures:
    """Call a plain batch handler; the failed messages by index (empty: all handled)."""
    error = _invoke(handler, messages, lambda: BatchContext(envs, peer_id))
    return {} if error is None else _failures(error, len(envs))


class Job:
    """One handler invocation; ``finish`` acks or records the failure."""

    __slots__ = ("env", "handler", "message", "ctx", "_finish", "_cancelled")

    def __init__(self, env: Envelope, handler: Handler, message: Any, peer_id: str,
                 finish: Callable[["Job", BaseException | None], None],
                 cancelled: Callable[[], bool] = _never) -> None:
        self.env = env
        self.handler = handler
        self.message = message
        self.ctx = MessageContext(env, peer_id)
        self._finish = finish
        self._cancelled = cancelled  # True: finish with ABANDONED instead of running

    @property
    def is_async(self) -> bool:
        """Whether the handler is ``async def``."""
        return self.handler.is_async

    def run(self) -> None:
        """Run a plain handler and finish."""
        if self._cancelled():
            self._finish(self, ABANDONED)
            return
        h = self.handler
        if h.batch:
            failed = call_batch(h, [self.message], [self.env], self.ctx.peer_id)
            self._finish(self, failed.get(0))
            return
        self._finish(self, _invoke(h, self.message, lambda: self.ctx))

    async def run_async(self) -> None:
        """Run an ``async def`` handler and finish."""
        if self._cancelled():
            self._finish(self, ABANDONED)
            return
        h = self.handler
        if h.batch:
            env, peer_id = self.env, self.ctx.peer_id
            error = await _invoke_async(h, [self.message], lambda: BatchContext([env], peer_id))
            self._finish(self, None if error is None else _failures(error, 1).get(0))
            return
        self._finish(self, await _invoke_async(h, self.message, lambda: self.ctx))


class RunJob:
    """One sender's run of plain (not ``async def``) handlers, run in order by one worker and
    finished together: one slot release and one ack batch for the run, no lane handoff per
    message. ``after_each`` (the persisted dedup store's record, or None) runs as soon as a
    handler returned, as for a single :class:`Job`, so a crash mid-run cannot let a handled
    message be handled again; ``done(ok, failed)`` then acks and reports."""

    __slots__ = ("items", "peer_id", "_after_each", "_done", "_cancelled")
    is_async = False

    def __init__(self, items: list[tuple[Envelope, Handler, Any]], peer_id: str,
                 after_each: Callable[[Envelope], None] | None,
                 done: Callable[[list[Envelope], list[tuple[Envelope, BaseException]], int],
                                None],
                 cancelled: Callable[[], bool] = _never) -> None:
        self.items, self.peer_id = items, peer_id
        self._after_each, self._done = after_each, done
        #: checked before each handler call: True abandons the rest of the run (the count of
        #: messages not run goes to ``done``)
        self._cancelled = cancelled

    def run(self) -> None:
        """Run each handler in order, then finish the run."""
        if any(h.batch for _, h, _ in self.items):
            self._run_batches()
            return
        peer_id, after_each, cancelled = self.peer_id, self._after_each, self._cancelled
        ok: list[Envelope] = []
        failed: list[tuple[Envelope, BaseException]] = []
        for n, (env, h, message) in enumerate(self.items):
            if cancelled():
                self._done(ok, failed, len(self.items) - n)
                return
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
        self._done(ok, failed, 0)

    def _run_batches(self) -> None:
        """:meth:`run` for a run with batch handlers: each stretch of messages that share
        one is a single call."""
        items, peer_id, after_each = self.items, self.peer_id, self._after_each
        ok: list[Envelope] = []
        failed: list[tuple[Envelope, BaseException]] = []
        i, n = 0, len(items)
        while i < n:
            if self._cancelled():
                self._done(ok, failed, n - i)
                return
            h = items[i][1]
            j = i + 1
            while j < n and items[j][1] is h:
                j += 1
            stretch = items[i:j]
            envs = [item[0] for item in stretch]
            if h.batch:
                errors = call_batch(h, [item[2] for item in stretch], envs, peer_id)
            else:
                errors = {}
                for k, (env, _, message) in enumerate(stretch):
                    error = _invoke(h, message, partial(MessageContext, env, peer_id))
                    if error is not None:
                        errors[k] = error
            if not errors and after_each is None:
                ok.extend(envs)
            else:
                for k, env in enumerate(envs):
                    error = errors.get(k)
                    if error is not None:
                        failed.append((env, error))
                        continue
                    if after_each is not None:
                        after_each(env)
                    ok.append(env)
            i = j
        self._done(ok, failed, 0)


class ColumnRun:
    """One sender's messages of a replayed chunk (:class:`~tidemark.peer_client.columns.Columns`,
    by position), run in order by one worker: a batch handler is called once per stretch of
    messages sharing it, a plain one per message; Envelopes are built only for a handler's
    context. ``done(run, failed, abandoned)`` gets the failures by position and how many
    were not run (the peer gave up on queued work)."""

    __slots__ = ("cols", "positions", "handlers", "messages", "peer_id", "_done", "_cancelled")
    is_async = False

    def __init__(self, cols: Columns, positions: list[int], handlers: list[Handler],
                 messages: list[Any], peer_id: str,
                 done: Callable[["ColumnRun", dict[int, BaseException], int], None],
                 cancelled: Callable[[], bool] = _never) -> None:
        self.cols, self.positions, self.peer_id = cols, positions, peer_id
        self.handlers, self.messages = handlers, messages  # by position in the chunk
        self._done, self._cancelled = done, cancelled

    def run(self) -> None:
        """Run the handlers in order, then finish."""
        positions, handlers, messages, cols = (self.positions, self.handlers, self.messages,
                                               self.cols)
        failed: dict[int, BaseException] = {}
        i, n = 0, len(positions)
        while i < n:
            if self._cancelled():
                self._done(self, failed, n - i)
                return
            h = handlers[positions[i]]
            j = i + 1
            while j < n and handlers[positions[j]] is h:
                j += 1
            stretch = positions[i:j] if i or j < n else positions
            if h.batch:
                errors = call_batch(h, [messages[k] for k in stretch],
                                    ColumnEnvelopes(cols, stretch), self.peer_id)
                for k, error in errors.items():
                    failed[stretch[k]] = error
            else:
                fn, with_context, peer_id = h.fn, h.takes_context, self.peer_id
                cancelled = self._cancelled
                for at, k in enumerate(stretch, i):
                    if at > i and cancelled():  # checked before each call, as RunJob does
                        self._done(self, failed, n - at)
                        return
                    try:
                        if with_context:
                            fn(messages[k], MessageContext(cols.envelope(k), peer_id))
                        else:
                            fn(messages[k])
                    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
                        failed[k] = exc
            i = j
        self._done(self, failed, 0)
