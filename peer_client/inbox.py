"""The receive side: the :class:`Inbox` applies what :mod:`tidemark.peer_client.decisions`
decides for each arriving message (holds it back, drops it, reports it, or submits a job to
the executor), and finishes the jobs (:mod:`tidemark.peer_client.jobs`): acks, or records
the failure (a persisted dedup store learns a handled id first). A replayed chunk kept as
columns takes the lean path (:meth:`Inbox.accept_columns`) when nothing in it needs a
decision of its own. Once the peer is stopping nothing new runs:
a message that arrives then (from any path: direct, replay, the txlog follower) is dropped
unacked and not remembered, so it is delivered again to the next incarnation, never handled
after the acks were flushed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tidemark.log.registry import env_value
from tidemark.peer_client.acks import TERM
from tidemark.peer_client.columns import Columns, sender_runs
from tidemark.peer_client.context import Phase
from tidemark.peer_client.decisions import (
    DROP,
    FAIL,
    HOLD,
    RUN,
    STOPPED_PHASES,
    CompletedIds,
    Decision,
    decide,
    decide_admitted,
)
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.exceptions import Nak, Term
from tidemark.peer_client.handlers import Handler, HandlerRegistry
from tidemark.peer_client.held import HeldBack
from tidemark.peer_client.jobs import ABANDONED, ColumnRun, Job, RunJob
from tidemark.peer_client.latency import Latencies, Timed
from tidemark.peer_client.records import Envelope
from tidemark.peer_client.serializers import decode_all
from tidemark.peer_client.slots import Slots
from tidemark.peer_client.timers import Cancellable, thread_timer

__all__ = ["Inbox"]

log = logging.getLogger("peer_client.inbox")
#: What :meth:`Inbox._apply_many` returns per message: ``(env, handler, message)`` to run,
#: ``(env, None, decision)`` otherwise.
_Todo = tuple[Envelope, "Handler | None", Any]


class Inbox:
    """Applies decisions: holds back, drops, reports, or submits jobs to the executor."""

    def __init__(self, peer_id: str, environment: str, handlers: HandlerRegistry,
                 dedup: DedupWindow, submit: Callable[[str, Job | RunJob], None],
                 on_failure: Callable[[Envelope, str, str], None],
                 on_success: Callable[[Envelope], None], stats: dict[str, int],
                 limit: int | None = None,
                 submit_many: Callable[[str, Sequence[Job]], None] | None = None,
                 on_success_many: Callable[[list[Envelope]], None] | None = None,
                 hold_limit: int = 10_000, hold_bytes: int = 64 << 20,
                 on_success_columns: Callable[[Columns, Sequence[int]], None] | None = None
                 ) -> None:
        self.peer_id, self.environment = peer_id, environment
        self.handlers, self.dedup = handlers, dedup
        self.phase = Phase.CREATED
        #: live messages held back during replay (see :mod:`tidemark.peer_client.held`)
        self.held = HeldBack(hold_limit, hold_bytes)
        #: set once the peer gives up on what is queued (a failed start): jobs not started
        #: yet are abandoned (neither handled nor acked: the next incarnation gets them)
        self.abandoning = False
        self.stats = stats
        self._submit, self._on_failure, self._on_success = submit, on_failure, on_success
        self._submit_many = submit_many  # None: accept_many accepts one by one
        self._on_success_many = on_success_many
        self._on_success_columns = on_success_columns
        self._lock = threading.Lock()
        self._admitted = threading.Condition(self._lock)
        self._admitting = 0  # decided to RUN, not yet submitted
        self._duplicates = 0  # dropped as duplicates (under the lock)
        self._queue_now = False  # _apply_many let held messages go: queue under the lock
        self._log_position = -1  # the follower dispatched txlog below this (when reported)
        self._slots = Slots(limit) if limit else None
        #: the persisted dedup store (None: off) and the clock its records are stamped with
        self.completed: CompletedIds | None = None
        self.clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)
        #: the queues' delivery limit: a nak that reaches it is not delivered again here
        #: (the queues dead-letter the message), like any failure
        self.delivery_limit = int(env_value("delivery_limit"))
        self._naks: dict[str, Cancellable] = {}  # nak'ed messages waiting, by id
        #: sampled latency histograms (the peer's; None: not timed)
        self.latencies: Latencies | None = None
        #: runs a function after a delay in seconds (the test double: on the bus's clock)
        self.schedule: Callable[[float, Callable[[], None]], Cancellable] = thread_timer

    def _apply(self, env: Envelope, phase: Phase) -> Decision | None:
        """Decide under the lock and count; None when the message is held or dropped for
        good, else a FAIL, a RUN or a DROP ``completed`` (to be acked) to act on."""
        held = self.held
        if env.replay:
            if held.watching:
                held.seen(env.message_id)
        elif (held.gates and env.sender in held.gates and phase not in STOPPED_PHASES
              and env.environment == self.environment):
            return self._count(env, Decision(HOLD))  # behind its sender's refused ones
        return self._count(env, decide(env, phase, self.environment, self.dedup, self.handlers,
                                       self.completed))

    def _count(self, env: Envelope, d: Decision) -> Decision | None:
        """:meth:`_apply` once ``d`` is decided."""
        if d.action == RUN:  # the common case first (the last branch below covers it too)
            self._admitting += 1
            return d
        if d.action == HOLD:
            if self.held.add(env):
                self.stats["held_back"] += 1
            else:
                self.stats["duplicates"] += 1
                self._duplicates += 1
            return None
        if d.action == DROP:
            if d.kind == "stopping":
                self.stats["refused_stopping"] += 1
                return None
            if d.kind != "completed":
                self.stats["duplicates" if d.kind == "duplicate" else "rejected"] += 1
                if d.kind != "duplicate":
                    log.warning("%s", d.reason)
                else:
                    self._duplicates += 1
                return None
            self.stats["completed_before"] += 1
        if d.action == FAIL:
            self.stats[d.kind] += 1
            self.dedup.forget(env.message_id)
        else:
            self._admitting += 1  # to run, or (completed before) to ack
        return d

    def _apply_many(self, envs: Sequence[Envelope], phase: Phase) -> list[_Todo]:
        """:meth:`_apply` of each of ``envs``, the phase asked once. A message to run comes
        back as ``(env, handler, message)``, any other as ``(env, None, decision)``. A
        message of this environment that the phase lets in is decided inline (dedup, handler,
        payload: what :func:`decide_admitted` does, without a Decision per message); anything
        unusual (no handler, a payload that does not decode, the dedup store) goes through
        :func:`decide`."""
        environment, dedup, handlers = self.environment, self.dedup, self.handlers
        completed, count = self.completed, self._count
        stopped = phase in STOPPED_PHASES
        live_held = phase is Phase.REPLAY  # live messages are held back during replay
        check, handler_of = dedup.check_and_add, handlers.get
        held = self.held if self.held.watching else None
        gates = self.held.gates
        todo: list[_Todo] = []
        append = todo.append
        runs = dups = 0
        for env in envs:
            if held is not None and env.replay:
                held.seen(env.message_id)  # its held copy is superseded by this logged one
                if held.opened:  # a sender's refused copies went by: what it held follows
                    d = count(env, decide(env, phase, environment, dedup, handlers, completed))
                    if d is not None:
                        append((env, d.handler, d.message) if d.action == RUN else (env, None, d))
                    todo.extend(self._opened_todo(phase))
                    self._queue_now = True  # the caller queues todo under the lock
                    continue
            if (completed is None and not stopped and env.environment == environment
                    and (env.replay or not (live_held or (gates and env.sender in gates)))):
                h = handler_of(env.message_type)
                if h is not None:
                    if not check(env.message_id):
                        dups += 1
                        continue
                    try:
                        append((env, h, h.message_type.serializer.decode(env.payload)))
                        runs += 1
                        continue
                    except Exception:  # noqa: BLE001 - decided (and reported) below
                        dedup.forget(env.message_id)
                d = count(env, decide_admitted(env, dedup, handlers, completed))
            elif (not env.replay and gates and env.sender in gates and not stopped
                  and env.environment == environment):
                d = count(env, Decision(HOLD))  # behind its sender's refused ones
            else:
                d = count(env, decide(env, phase, environment, dedup, handlers, completed))
            if d is not None:
                append((env, d.handler, d.message) if d.action == RUN else (env, None, d))
        self._admitting += runs
        if dups:
            self._duplicates += dups
            self.stats["duplicates"] += dups
        return todo

    def _opened_todo(self, phase: Phase) -> list[_Todo]:
        """Under the lock: the held messages that gates just opened let go (none during
        replay: everything held waits for the release then), decided for ``phase``."""
        held = self.held
        senders, held.opened = held.opened, []
        if phase is Phase.REPLAY or phase in STOPPED_PHASES or not senders:
            return []
        return self._decide_released(held.take_open(senders), phase)

    def _decide_released(self, envs: list[Envelope], phase: Phase) -> list[_Todo]:
        """Under the lock: held messages let go, decided for ``phase`` (no gate: they are
        the ones it let through)."""
        out: list[_Todo] = []
        for env in envs:
            d = self._count(env, decide(env, phase, self.environment, self.dedup,
                                        self.handlers, self.completed))
            if d is not None:
                out.append((env, d.handler, d.message) if d.action == RUN else (env, None, d))
        return out

    def _queue_locked(self, todo: list[_Todo]) -> list[tuple[Envelope, Decision]]:
        """Under the lock: queue ``todo``'s runs on their senders' lanes at once (slots
        taken without waiting), so nothing decided later can overtake them; returns the
        failures and completed-before ones for :meth:`_finish_others`, outside the lock."""
        runs: dict[str, list[tuple[Envelope, Handler, Any]]] = {}
        others: list[tuple[Envelope, Decision]] = []
        for env, h, d in todo:
            if h is None:
                others.append((env, d))
            else:
                runs.setdefault(env.sender, []).append((env, h, d))
        queued = sum(len(items) for items in runs.values())
        if self._slots is not None and queued:
            self._slots.force(queued)
        if self._submit_many is not None:
            self._submit_runs(runs)
        else:
            for sender, items in runs.items():
                for env, h, m in items:
                    self._submit(sender, self._timed(Job(env, h, m, self.peer_id, self._finish,
                                                         self._is_abandoning)))
        self._admitting -= queued
        if not self._admitting:
            self._admitted.notify_all()
        return others

    def _finish_others(self, others: list[tuple[Envelope, Decision]]) -> None:
        for env, d in others:
            if d.action == FAIL:
                self._report(env, d)
                continue
            try:
                self._on_success(env)  # completed by an earlier incarnation: acked only
            finally:
                self._admitted_done(1)

    def _report(self, env: Envelope, d: Decision) -> None:
        log.warning("peer %s: %s (message %s from %s) - not acked, reported",
                    self.peer_id, d.reason, env.message_id, env.sender)
        self._on_failure(env, d.reason, d.kind)

    def _admitted_done(self, n: int) -> None:
        with self._lock:
            self._admitting -= n
            if not self._admitting:
                self._admitted.notify_all()

    def accept(self, env: Envelope, phase: Phase | None = None) -> None:
        """Take one arriving message (blocks while ``limit`` messages are unfinished);
        ``phase`` overrides the inbox's phase (for held-back messages being released)."""
        with self._lock:
            d = self._apply(env, phase or self.phase)
            if self.held.opened:  # its sender's held messages follow it: queue them now
                todo = [] if d is None else [
                    (env, d.handler, d.message) if d.action == RUN else (env, None, d)]
                todo.extend(self._opened_todo(phase or self.phase))
                others = self._queue_locked(todo)
                d = None
            else:
                others = []
        if others:
            self._finish_others(others)
        if d is None:
            return
        if d.action == FAIL:
            self._report(env, d)
            return
        try:
            if d.action == DROP:  # completed by an earlier incarnation: acked, not run again
                self._on_success(env)
                return
            if self._slots is not None:
                self._slots.take()
            assert d.handler is not None
            self._submit(env.sender, self._timed(Job(env, d.handler, d.message, self.peer_id,
                                                     self._finish, self._is_abandoning)))
        finally:
            self._admitted_done(1)

    def accept_many(self, envs: Sequence[Envelope]) -> int:
        """:meth:`accept` each message of ``envs`` in order, with the same decisions, but
        decided under one lock and each sender's jobs submitted as one run (one worker runs
        them in order, without a thread handoff each). Blocks like :meth:`accept` while
        ``limit`` messages are unfinished: what was gathered is submitted first. Returns
        how many of ``envs`` were not dropped as duplicates."""
        submit_many = self._submit_many
        if submit_many is None:
            with self._lock:
                before = self._duplicates
            for env in envs:
                self.accept(env)
            with self._lock:  # approximate: other paths may drop duplicates meanwhile
                return len(envs) - (self._duplicates - before)
        with self._lock:
            before = self._duplicates
            todo = self._apply_many(envs, self.phase)
            fresh = len(envs) - (self._duplicates - before)
            if self._queue_now:  # a gate opened: its held messages go right behind
                self._queue_now = False
                others = self._queue_locked(todo)
                todo = []
            else:
                others = []
        if others:
            self._finish_others(others)
        admitted = to_run = 0
        for _, h, d in todo:
            if h is not None:
                to_run += 1
            elif d.action != FAIL:
                admitted += 1
        admitted += to_run
        runs: dict[str, list[tuple[Envelope, Handler, Any]]] = {}
        slots = self._slots
        spare = 0  # slots taken, not used yet (given back if submitting fails)
        try:
            for env, h, m in todo:
                if h is None:
                    if m.action == FAIL:
                        self._report(env, m)
                    else:  # DROP: completed by an earlier incarnation, acked only
                        self._on_success(env)
                    continue
                if slots is not None:
                    if not spare:
                        spare = slots.take(to_run, blocking=False)
                        if not spare:
                            self._submit_runs(runs)  # they must run to free a slot
                            spare = slots.take(to_run)
                    spare -= 1
                    to_run -= 1
                run = runs.get(env.sender)
                if run is None:
                    runs[env.sender] = [(env, h, m)]
                else:
                    run.append((env, h, m))
            self._submit_runs(runs)
        finally:
            if spare and slots is not None:
                slots.give(spare)
            if admitted:
                self._admitted_done(admitted)
        return fresh

    def accept_columns(self, cols: Columns) -> int | None:
        """The lean replay path: :meth:`accept_many` of a replayed chunk kept as columns,
        with the same decisions taken in bulk (one dedup call, one decode loop per type,
        one job per sender). Returns how many were not dropped as duplicates, or None
        without doing anything when the chunk needs the general path: no batch executor,
        the persisted dedup store, a type without a plain handler, a payload that does not
        decode, the peer stopping, or an id the held-back list watches for."""
        if self._submit_many is None or self.completed is not None or not len(cols):
            return None
        handler_of = self.handlers.get
        kinds: dict[str, Handler] = {}
        for name in set(cols.types):
            h = handler_of(name)
            if h is None or h.is_async:
                return None
            kinds[name] = h
        try:  # outside the lock: the general path says which payload is bad, and why
            if len(kinds) == 1:
                h = next(iter(kinds.values()))
                handlers = [h] * len(cols)
                messages = decode_all(h.message_type.serializer, cols.payloads)
            else:
                handlers = [kinds[name] for name in cols.types]
                messages = [h.message_type.serializer.decode(p)
                            for h, p in zip(handlers, cols.payloads, strict=True)]
        except Exception:  # noqa: BLE001 - a user serializer may raise anything
            return None
        with self._lock:
            held = self.held
            if self.phase in STOPPED_PHASES or (held.watching and held.watches_any(cols.ids)):
                return None
            dups = self.dedup.check_and_add_many(cols.ids)
            fresh = len(cols) - len(dups)
            self._admitting += fresh
            if dups:
                self._duplicates += len(dups)
                self.stats["duplicates"] += len(dups)
        try:
            if not dups:
                positions: list[int] = list(range(len(cols)))
            else:
                skip = set(dups)
                positions = [i for i in range(len(cols)) if i not in skip]
            slots, submit = self._slots, self._submit
            for sender, run in sender_runs(cols.senders, positions).items():
                at = 0
                while at < len(run):
                    k = len(run) - at if slots is None else slots.take(len(run) - at)
                    part = run[at:at + k] if at or k < len(run) else run
                    try:
                        submit(sender, self._timed(ColumnRun(
                            cols, part, handlers, messages, self.peer_id,
                            self._finish_columns, self._is_abandoning), k))
                    except BaseException:
                        if slots is not None:
                            slots.give(k)  # not submitted: nothing will give them back
                        raise
                    at += k
        finally:
            if fresh:
                self._admitted_done(fresh)
        return fresh

    def _finish_columns(self, run: ColumnRun, failed: dict[int, BaseException],
                        abandoned: int) -> None:
        """A :class:`ColumnRun` finished: what ran without failing is acked together,
        ``failed`` reported (by position), ``abandoned`` (not run) forgotten."""
        positions, cols = run.positions, run.cols
        if self._slots is not None:
            self._slots.give(len(positions))
        ran: Sequence[int] = positions
        if abandoned:
            self.stats["abandoned"] += abandoned
            ran = positions[:len(positions) - abandoned]
        ok = [k for k in ran if k not in failed] if failed else ran
        if ok:
            self.stats["handled"] += len(ok)
            if self._on_success_columns is not None:
                self._on_success_columns(cols, ok)
            else:
                envs = [cols.envelope(k) for k in ok]
                if self._on_success_many is not None:
                    self._on_success_many(envs)
                else:
                    for env in envs:
                        self._on_success(env)
        for k, error in failed.items():
            self._failed(cols.envelope(k), error)

    def _submit_runs(self, runs: dict[str, list[tuple[Envelope, Handler, Any]]]) -> None:
        """Each sender's run as one :class:`RunJob` (plain handlers), or as single jobs
        submitted together when one of its handlers is ``async def``."""
        assert self._submit_many is not None
        completed = self.completed
        after_each = self._record_persistent if completed is not None else None
        for sender, items in runs.items():
            if any(h.is_async for _, h, _ in items):
                self._submit_many(sender, [self._timed(Job(env, h, m, self.peer_id, self._finish,
                                                           self._is_abandoning))
                                           for env, h, m in items])
            else:
                self._submit(sender, self._timed(RunJob(items, self.peer_id, after_each,
                                                        self._finish_run, self._is_abandoning),
                                                 len(items)))
        runs.clear()

    def stop_admitting(self, phase: Phase, timeout: float) -> bool:
        """Move to ``phase`` (one of :data:`STOPPED_PHASES`) and wait until every message
        decided to run before that is submitted, so that an executor drain that follows
        covers it; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self.phase = phase
            while self._admitting:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._admitted.wait(left)
        return True

    def _is_abandoning(self) -> bool:
        return self.abandoning

    def abandon(self) -> None:
        """Give up on queued work: a job or the rest of a run that has not started is
        dropped unhandled and unacked (the next incarnation gets it again)."""
        self.abandoning = True

    def _finish(self, job: Job, error: BaseException | None) -> None:
        if self._slots is not None:
            self._slots.give()
        env = job.env
        if error is ABANDONED:
            self.stats["abandoned"] += 1
            return
        if error is None:
            self.stats["handled"] += 1
            self._record_persistent(env)
            self._on_success(env)
            return
        self._failed(env, error)

    def _finish_run(self, ok: list[Envelope],
                    failed: list[tuple[Envelope, BaseException]], abandoned: int = 0) -> None:
        """A :class:`RunJob` finished: ``ok`` are acked together, ``failed`` reported,
        ``abandoned`` (not run: the peer gave up on queued work) forgotten."""
        if self._slots is not None:
            self._slots.give(len(ok) + len(failed) + abandoned)
        if abandoned:
            self.stats["abandoned"] += abandoned
        if ok:
            self.stats["handled"] += len(ok)
            if self._on_success_many is not None:
                self._on_success_many(ok)
            else:
                for env in ok:
                    self._on_success(env)
        for env, error in failed:
            self._failed(env, error)

    def _record_persistent(self, env: Envelope) -> None:
        completed = self.completed
        if completed is not None and env.persistent:
            self._record_completed(completed, env)

    def _failed(self, env: Envelope, error: BaseException) -> None:
        if isinstance(error, Nak) and self._nak(env, error):
            return
        term = isinstance(error, Term)
        with self._lock:
            if term:
                self.stats["terminated"] += 1  # stays in dedup: not run again here
            else:
                self.dedup.forget(env.message_id)
            self.stats["handler_failed"] += 1
        if term:
            assert isinstance(error, Term)
            log.info("peer %s: handler for %s terminated message %s from %s: %s",
                     self.peer_id, env.message_type, env.message_id, env.sender, error.reason)
            self._on_failure(env, f"terminated: {error.reason}", TERM)
            return
        reason = f"{type(error).__name__}: {error}"
        log.warning("peer %s: handler for %s failed on message %s from %s: %s - not acked",
                    self.peer_id, env.message_type, env.message_id, env.sender, reason)
        self._on_failure(env, reason, "handler")

    def _nak(self, env: Envelope, nak: Nak) -> bool:
        """A handler nak'ed ``env``: record the failed delivery and deliver it again here
        after the delay (it stays in the dedup window meanwhile, so a replayed or resent
        copy is not run beside it). False when it is not delivered again here: at the
        delivery limit (the queues dead-letter it), stopping, or its handler is gone."""
        handler = self.handlers.get(env.message_type)
        count = env.delivery_count + 1
        if handler is None or count >= self.delivery_limit or self._is_abandoning() \
                or self.phase in STOPPED_PHASES:
            return False
        delay = nak.delay if nak.delay is not None else handler.nak_delay(env.delivery_count)
        with self._lock:
            self.stats["handler_failed"] += 1
            self.stats["naks"] += 1
        self._on_failure(env, f"nak: again after {delay:g} s", "nak")
        again = replace(env, delivery_count=count)
        with self._lock:
            self._naks[env.message_id] = self.schedule(
                delay, lambda: self._deliver_again(again, handler))
        return True

    def _deliver_again(self, env: Envelope, handler: Handler) -> None:
        """A nak's delay is over: run ``env`` again (unless the peer stopped meanwhile: the
        message is not acked, so its next incarnation gets it)."""
        with self._lock:
            self._naks.pop(env.message_id, None)
        if self._is_abandoning() or self.phase in STOPPED_PHASES:
            return
        try:
            message = handler.message_type.serializer.decode(env.payload)
        except Exception as exc:  # noqa: BLE001 - it decoded before; report, never raise here
            self._failed(env, exc)
            return
        if self._slots is not None:
            self._slots.take()
        self._submit(env.sender, self._timed(Job(env, handler, message, self.peer_id,
                                                 self._finish, self._is_abandoning)))

    def _timed(self, job: Job | RunJob | ColumnRun, n: int = 1) -> Any:
        """``job`` (of ``n`` messages), timed when it holds the sampled message."""
        latencies = self.latencies
        if latencies is None or not latencies.sample_handler(n):
            return job
        return Timed(job, latencies.by_name["handler"], n)

    def naks_waiting(self) -> int:
        """Messages nak'ed and waiting for their delay."""
        with self._lock:
            return len(self._naks)

    def cancel_naks(self) -> int:
        """Stop every nak's wait (the peer stops: those messages are not acked, the next
        incarnation gets them); returns how many."""
        with self._lock:
            timers, self._naks = list(self._naks.values()), {}
        for t in timers:
            t.cancel()
        return len(timers)

    def _record_completed(self, completed: CompletedIds, env: Envelope) -> None:
        """Persist the id before the ack is queued; a failed write is logged (the ack
        still goes: once it is in Kafka the message is not delivered again anyway)."""
        try:
            completed.record(env.message_id, self.clock_ms())
        except Exception as exc:  # noqa: BLE001 - the store must not lose the ack
            self.stats["dedup_store_errors"] += 1
            log.error("peer %s: could not record message %s in the dedup store: %s",
                      self.peer_id, env.message_id, exc)

    def release(self, phase: Phase) -> None:
        """Move to ``phase`` (HANDOVER or NORMAL), dispatching the held-back messages in
        arrival order first. They are decided and queued on their senders' lanes under the
        lock, and the phase changes in the same step: a live message arriving afterwards is
        queued behind them, so it never overtakes an earlier held one of its sender, and the
        change takes one step however fast live messages come (releasing in rounds outside
        the lock never ended while they came as fast as the handlers ran). The queued
        messages may exceed the inbox ``limit`` by the held-back bound for a while. A
        sender with refused messages not yet seen in the log stays gated: its held messages
        wait for those copies (see :mod:`tidemark.peer_client.held`)."""
        with self._lock:
            self.held.opened.clear()  # everything that may go, goes now
            todo = self._decide_released(self.held.take_open(), phase)
            others = self._queue_locked(todo)
            self.phase = phase
        self._finish_others(others)

    def wait_for_log(self, sender: str, floor: int) -> bool:
        """A direct batch from ``sender`` follows its unmarked Sends up to txlog offset
        ``floor``: unless the follower is past it, the sender's messages from now on are
        held until it is (True then)."""
        with self._lock:
            if floor < self._log_position:
                return False
            self.held.gate_floor(sender, floor, time.monotonic())
            self.stats["waited_for_log"] += 1
            return True

    def next_floor(self) -> int:
        """The lowest txlog offset a direct batch waits for the follower to pass (-1: none)."""
        with self._lock:
            floors = self.held.floors
            return floors[0][0] if floors else -1

    def log_position(self, position: int) -> None:
        """The follower dispatched txlog below ``position``: senders waiting for it go on,
        behind what it dispatched."""
        with self._lock:
            if position > self._log_position:
                self._log_position = position
            self.held.pass_floor(position)
            if not self.held.opened:
                return
            others = self._queue_locked(self._opened_todo(self.phase))
        self._finish_others(others)

    def expire_gates(self, wait_s: float) -> int:
        """Open the gates of senders whose refused copies have not come for ``wait_s``
        (the sender may have died before its append) and dispatch what they held; returns
        how many messages went."""
        with self._lock:
            senders = self.held.expire(time.monotonic(), wait_s)
            if not senders:
                return 0
            todo = self._opened_todo(self.phase)
            others = self._queue_locked(todo)
        self._finish_others(others)
        log.warning("peer %s: refused messages of %s not seen in txlog within %.0f s;"
                    " releasing %d message(s) held behind them", self.peer_id,
                    ", ".join(sorted(senders)), wait_s, len(todo))
        return len(todo)

    def hold_room(self, n: int, nbytes: int, persistent_ids: Sequence[str] = (),
                  sender: str = "") -> bool:
        """Whether a direct batch of ``n`` messages (``nbytes`` of payload) from ``sender``
        may be held back now; counts them as refused if not (and remembers
        ``persistent_ids`` until their logged copies go by: ``sender`` is gated until then).
        True when nothing is held: outside replay, unless ``sender`` is gated."""
        with self._lock:
            held = self.held
            if ((self.phase is not Phase.REPLAY and sender not in held.gates)
                    or held.room(n, nbytes)):
                return True
            held.refuse(n, persistent_ids, sender, time.monotonic())
            self.stats["refused_held_full"] += n
            return False

    def held_unseen(self) -> int:
        """Held-back or refused persistent messages whose logged copy has not gone by."""
        with self._lock:
            return self.held.unseen()

    def held_unseen_ids(self) -> set[str]:
        """The ids :meth:`held_unseen` counts."""
        with self._lock:
            return self.held.unseen_ids()

    def held_still_unseen(self, ids: set[str]) -> set[str]:
        """Those of ``ids`` whose logged copy has not gone by yet."""
        with self._lock:
            return self.held.still_unseen(ids)

    def forget_refused(self) -> None:
        """Stop waiting for refused messages' logged copies: every gate opens, and outside
        replay what the gated senders held goes now."""
        with self._lock:
            self.held.forget_refused()
            others = self._queue_locked(self._opened_todo(self.phase))
        self._finish_others(others)

    def held_status(self) -> dict[str, Any]:
        """The held-back list's counts (``Peer.status()["held"]``)."""
        with self._lock:
            return self.held.status()
