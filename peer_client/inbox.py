"""The receive side: the :class:`Inbox` takes each arriving message under one lock, applies
what :mod:`tidemark.peer_client.decisions` decides for it (holds it back, drops it, reports
it) and submits the jobs to the executor on their senders' lanes, in order, within its
``limit``. Once the peer is stopping nothing new runs: a message that arrives then (from
any path: direct, replay, the txlog follower) is dropped unacked and not remembered, so it is
delivered again to the next incarnation, never handled after the acks were flushed.

The inbox is composed of collaborators, one concept each, sharing its lock and stats:
:class:`~tidemark.peer_client.admission.Admission` applies the decisions (pure, no I/O);
:class:`~tidemark.peer_client.finishing.Finisher` finishes the jobs
(:mod:`tidemark.peer_client.jobs`: acks, the persisted dedup store learning a handled id
first); :class:`~tidemark.peer_client.failures.Failures` reports what is not acked and
delivers a nak'ed message again; :class:`~tidemark.peer_client.column_intake.ColumnIntake`
takes a replayed chunk kept as columns (the lean path, :meth:`Inbox.accept_columns`) when
nothing in it needs a decision of its own; :class:`~tidemark.peer_client.held_gates.HeldGates`
drives the held-back list's gates and the follower's log position.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tidemark.peer_client.admission import Admission, Todo
from tidemark.peer_client.column_intake import ColumnIntake
from tidemark.peer_client.columns import Columns
from tidemark.peer_client.context import Phase
from tidemark.peer_client.decisions import (
    DROP,
    FAIL,
    RUN,
    STOPPED_PHASES,
    CompletedIds,
    Decision,
)
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.failures import Failures
from tidemark.peer_client.finishing import Finisher
from tidemark.peer_client.handlers import Handler, HandlerRegistry
from tidemark.peer_client.held import HeldBack
from tidemark.peer_client.held_gates import HeldGates
from tidemark.peer_client.jobs import ColumnRun, Job, RunJob
from tidemark.peer_client.latency import Latencies, Timed
from tidemark.peer_client.records import Envelope
from tidemark.peer_client.slots import Slots
from tidemark.peer_client.timers import Cancellable

__all__ = ["Inbox"]


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
        self.peer_id, self.environment, self.dedup = peer_id, environment, dedup
        self.phase = Phase.CREATED
        #: live messages held back during replay (see :mod:`tidemark.peer_client.held`)
        self.held = HeldBack(hold_limit, hold_bytes)
        #: set once the peer gives up on what is queued (a failed start): jobs not started
        #: yet are abandoned (neither handled nor acked: the next incarnation gets them)
        self.abandoning = False
        self.stats = stats
        self._admission = Admission(environment, handlers, dedup, self.held, stats)
        self._submit, self._on_success = submit, on_success
        self._submit_many = submit_many  # None: accept_many accepts one by one
        self._lock = threading.Lock()
        self._admitted = threading.Condition(self._lock)
        self._slots = Slots(limit) if limit else None
        #: the clock the persisted dedup store's records are stamped with
        self.clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)
        #: sampled latency histograms (the peer's; None: not timed)
        self.latencies: Latencies | None = None
        self._failures = Failures(peer_id, stats, self._lock, dedup, on_failure,
                                  lambda name: self.handlers.get(name), self._stopping,
                                  self._submit_one)
        self._finisher = Finisher(peer_id, stats, self._slots, on_success, on_success_many,
                                  on_success_columns, self._failures.failed,
                                  lambda: self.completed, lambda: self.clock_ms())
        self._columns = ColumnIntake(peer_id, submit_many is not None, self._slots, submit,
                                     self._timed, self._admit_chunk, self._admitted_done,
                                     self._finisher.columns, self._is_abandoning)
        self._gates = HeldGates(peer_id, self.held, self._lock, stats, lambda: self.phase,
                                self._let_go, self._finish_others)

    @property
    def handlers(self) -> HandlerRegistry:
        """The handlers messages are decided (and run) with."""
        return self._admission.handlers

    @handlers.setter
    def handlers(self, handlers: HandlerRegistry) -> None:
        self._admission.handlers = handlers

    @property
    def completed(self) -> CompletedIds | None:
        """The persisted dedup store (None: off)."""
        return self._admission.completed

    @completed.setter
    def completed(self, completed: CompletedIds | None) -> None:
        self._admission.completed = completed

    @property
    def delivery_limit(self) -> int:
        """The queues' delivery limit: a nak that reaches it is not delivered again here
        (the queues dead-letter the message), like any failure."""
        return self._failures.delivery_limit

    @delivery_limit.setter
    def delivery_limit(self, limit: int) -> None:
        self._failures.delivery_limit = limit

    @property
    def schedule(self) -> Callable[[float, Callable[[], None]], Cancellable]:
        """Runs a function after a delay in seconds (the test double: on the bus's clock)."""
        return self._failures.schedule

    @schedule.setter
    def schedule(self, schedule: Callable[[float, Callable[[], None]], Cancellable]) -> None:
        self._failures.schedule = schedule

    def _queue_locked(self, todo: list[Todo]) -> list[tuple[Envelope, Decision]]:
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
                    self._submit(sender, self._timed(self._job(env, h, m)))
        if self._admission.submitted(queued):
            self._admitted.notify_all()
        return others

    def _finish_others(self, others: list[tuple[Envelope, Decision]]) -> None:
        """Outside the lock: report the failures, ack the completed-before ones."""
        for env, d in others:
            if d.action == FAIL:
                self._failures.report(env, d)
                continue
            try:
                self._on_success(env)  # completed by an earlier incarnation: acked only
            finally:
                self._admitted_done(1)

    def _admitted_done(self, n: int) -> None:
        """``n`` admitted messages were submitted, acked or reported (takes the lock)."""
        with self._lock:
            if self._admission.submitted(n):
                self._admitted.notify_all()

    def accept(self, env: Envelope, phase: Phase | None = None) -> None:
        """Take one arriving message (blocks while ``limit`` messages are unfinished);
        ``phase`` overrides the inbox's phase (for held-back messages being released)."""
        with self._lock:
            d = self._admission.apply(env, phase or self.phase)
            if self.held.opened:  # its sender's held messages follow it: queue them now
                todo = [] if d is None else [
                    (env, d.handler, d.message) if d.action == RUN else (env, None, d)]
                todo.extend(self._admission.opened_todo(phase or self.phase))
                others = self._queue_locked(todo)
                d = None
            else:
                others = []
        if others:
            self._finish_others(others)
        if d is None:
            return
        if d.action == FAIL:
            self._failures.report(env, d)
            return
        try:
            if d.action == DROP:  # completed by an earlier incarnation: acked, not run again
                self._on_success(env)
                return
            assert d.handler is not None
            self._submit_one(env, d.handler, d.message)
        finally:
            self._admitted_done(1)

    def accept_many(self, envs: Sequence[Envelope]) -> int:
        """:meth:`accept` each message of ``envs`` in order, with the same decisions, but
        decided under one lock and each sender's jobs submitted as one run (one worker runs
        them in order, without a thread handoff each). Blocks like :meth:`accept` while
        ``limit`` messages are unfinished: what was gathered is submitted first. Returns
        how many of ``envs`` were not dropped as duplicates."""
        submit_many, admission = self._submit_many, self._admission
        if submit_many is None:
            with self._lock:
                before = admission.duplicates
            for env in envs:
                self.accept(env)
            with self._lock:  # approximate: other paths may drop duplicates meanwhile
                return len(envs) - (admission.duplicates - before)
        with self._lock:
            before = admission.duplicates
            todo = admission.apply_many(envs, self.phase)
            fresh = len(envs) - (admission.duplicates - before)
            if admission.queue_now:  # a gate opened: its held messages go right behind
                admission.queue_now = False
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
                        self._failures.report(env, m)
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
        return self._columns.accept(cols, self.handlers, self.completed)

    def _admit_chunk(self, ids: list[str]) -> list[int] | None:
        """:meth:`Admission.apply_ids` under the lock, for :meth:`accept_columns`."""
        with self._lock:
            return self._admission.apply_ids(ids, self.phase)

    def _submit_runs(self, runs: dict[str, list[tuple[Envelope, Handler, Any]]]) -> None:
        """Each sender's run as one :class:`RunJob` (plain handlers), or as single jobs
        submitted together when one of its handlers is ``async def``."""
        assert self._submit_many is not None
        completed = self.completed
        after_each = self._finisher.record_persistent if completed is not None else None
        for sender, items in runs.items():
            if any(h.is_async for _, h, _ in items):
                self._submit_many(sender, [self._timed(self._job(env, h, m))
                                           for env, h, m in items])
            else:
                self._submit(sender, self._timed(RunJob(items, self.peer_id, after_each,
                                                        self._finisher.run, self._is_abandoning),
                                                 len(items)))
        runs.clear()

    def stop_admitting(self, phase: Phase, timeout: float) -> bool:
        """Move to ``phase`` (one of :data:`STOPPED_PHASES`) and wait until every message
        decided to run before that is submitted, so that an executor drain that follows
        covers it; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self.phase = phase
            while self._admission.admitting:
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

    def _stopping(self) -> bool:
        """Whether the peer gave up on queued work or is stopping (nothing runs again)."""
        return self._is_abandoning() or self.phase in STOPPED_PHASES

    def _job(self, env: Envelope, h: Handler, m: Any) -> Job:
        """The job that runs ``h`` on ``env``'s message ``m``."""
        return Job(env, h, m, self.peer_id, self._finisher.job, self._is_abandoning)

    def _submit_one(self, env: Envelope, h: Handler, m: Any) -> None:
        """Submit the job of ``env`` on its sender's lane (an inbox slot taken, waiting)."""
        if self._slots is not None:
            self._slots.take()
        self._submit(env.sender, self._timed(self._job(env, h, m)))

    def _timed(self, job: Job | RunJob | ColumnRun, n: int = 1) -> Any:
        """``job`` (of ``n`` messages), timed when it holds the sampled message."""
        latencies = self.latencies
        if latencies is None or not latencies.sample_handler(n):
            return job
        return Timed(job, latencies.by_name["handler"], n)

    def naks_waiting(self) -> int:
        """Messages nak'ed and waiting for their delay."""
        return self._failures.waiting()

    def cancel_naks(self) -> int:
        """Stop every nak's wait (the peer stops); returns how many."""
        return self._failures.cancel()

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
            todo = self._admission.decide_released(self.held.take_open(), phase)
            others = self._queue_locked(todo)
            self.phase = phase
        self._finish_others(others)

    def _let_go(self) -> tuple[int, list[tuple[Envelope, Decision]]]:
        """Under the lock: queue what the gates that just opened let go; how many went, and
        the failures and completed-before ones for :meth:`_finish_others`."""
        todo = self._admission.opened_todo(self.phase)
        return len(todo), self._queue_locked(todo)

    def wait_for_log(self, sender: str, floor: int) -> bool:
        """:meth:`HeldGates.wait_for_log`: hold ``sender``'s messages until the follower
        passes txlog offset ``floor`` (True), unless it is past it already."""
        return self._gates.wait_for_log(sender, floor)

    def next_floor(self) -> int:
        """The lowest txlog offset a direct batch waits for the follower to pass (-1: none)."""
        return self._gates.next_floor()

    def log_position(self, position: int) -> None:
        """The follower dispatched txlog below ``position`` (:meth:`HeldGates.log_position`)."""
        self._gates.log_position(position)

    def expire_gates(self, wait_s: float) -> int:
        """Open the gates whose refused copies have not come for ``wait_s``
        (:meth:`HeldGates.expire`); returns how many messages went."""
        return self._gates.expire(wait_s)

    def hold_room(self, n: int, nbytes: int, persistent_ids: Sequence[str] = (),
                  sender: str = "") -> bool:
        """Whether a direct batch from ``sender`` may be held back now, else refused and
        counted (:meth:`HeldGates.hold_room`)."""
        return self._gates.hold_room(n, nbytes, persistent_ids, sender)

    def forget_refused(self) -> None:
        """Stop waiting for refused messages' logged copies: every gate opens."""
        self._gates.forget_refused()

    def held_unseen(self) -> int:
        """Held-back or refused persistent messages whose logged copy has not gone by."""
        return self._gates.unseen()

    def held_unseen_ids(self) -> set[str]:
        """The ids :meth:`held_unseen` counts."""
        return self._gates.unseen_ids()

    def held_still_unseen(self, ids: set[str]) -> set[str]:
        """Those of ``ids`` whose logged copy has not gone by yet."""
        return self._gates.still_unseen(ids)

    def held_status(self) -> dict[str, Any]:
        """The held-back list's counts (``Peer.status()["held"]``)."""
        return self._gates.status()
