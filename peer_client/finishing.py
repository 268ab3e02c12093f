"""A handler job finished: its inbox slots are given back, what ran is acked (a persisted
dedup store learns a handled persistent id first), what failed goes to
:class:`~tidemark.peer_client.failures.Failures`, and what was abandoned (the peer gave up on
queued work) is only counted: neither handled nor acked, the next incarnation gets it.

One finish per kind of job (:mod:`tidemark.peer_client.jobs`): :meth:`Finisher.job`,
:meth:`Finisher.run` and :meth:`Finisher.columns`. A collaborator of the
:class:`~tidemark.peer_client.inbox.Inbox`: it reads the inbox's dedup store and clock through
the callables it is given (either may change after the inbox is built).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tidemark.peer_client.columns import Columns
from tidemark.peer_client.decisions import CompletedIds
from tidemark.peer_client.jobs import ABANDONED, ColumnRun, Job
from tidemark.peer_client.records import Envelope
from tidemark.peer_client.slots import Slots

__all__ = ["Finisher"]

log = logging.getLogger("peer_client.inbox")


class Finisher:
    """Finishes the inbox's jobs: acks, records, reports, gives slots back."""

    def __init__(self, peer_id: str, stats: dict[str, int], slots: Slots | None,
                 on_success: Callable[[Envelope], None],
                 on_success_many: Callable[[list[Envelope]], None] | None,
                 on_success_columns: Callable[[Columns, Sequence[int]], None] | None,
                 failed: Callable[[Envelope, BaseException], None],
                 completed: Callable[[], CompletedIds | None],
                 clock_ms: Callable[[], int]) -> None:
        """``stats`` and ``slots`` are the inbox's; ``failed`` takes a handler's failure;
        ``completed`` is the persisted dedup store now (None: off), ``clock_ms`` the clock
        its records are stamped with."""
        self.peer_id, self.stats, self._slots = peer_id, stats, slots
        self._on_success, self._on_success_many = on_success, on_success_many
        self._on_success_columns = on_success_columns
        self.failed = failed
        self._completed, self._clock_ms = completed, clock_ms

    def job(self, job: Job, error: BaseException | None) -> None:
        """A :class:`Job` finished: acked, reported (``error``), or abandoned."""
        if self._slots is not None:
            self._slots.give()
        env = job.env
        if error is ABANDONED:
            self.stats["abandoned"] += 1
            return
        if error is None:
            self.stats["handled"] += 1
            self.record_persistent(env)
            self._on_success(env)
            return
        self.failed(env, error)

    def run(self, ok: list[Envelope], failed: list[tuple[Envelope, BaseException]],
            abandoned: int = 0) -> None:
        """A :class:`RunJob` finished: ``ok`` are acked together, ``failed`` reported,
        ``abandoned`` (not run: the peer gave up on queued work) forgotten."""
        if self._slots is not None:
            self._slots.give(len(ok) + len(failed) + abandoned)
        if abandoned:
            self.stats["abandoned"] += abandoned
        if ok:
            self.stats["handled"] += len(ok)
            self._ack_many(ok)
        for env, error in failed:
            self.failed(env, error)

    def columns(self, run: ColumnRun, failed: dict[int, BaseException],
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
                self._ack_many([cols.envelope(k) for k in ok])
        for k, error in failed.items():
            self.failed(cols.envelope(k), error)

    def _ack_many(self, envs: list[Envelope]) -> None:
        """Ack ``envs`` together (one by one without ``on_success_many``)."""
        if self._on_success_many is not None:
            self._on_success_many(envs)
        else:
            for env in envs:
                self._on_success(env)

    def record_persistent(self, env: Envelope) -> None:
        """A handled ``env``: the persisted dedup store (if on) learns its id, if persistent."""
        completed = self._completed()
        if completed is not None and env.persistent:
            self._record_completed(completed, env)

    def _record_completed(self, completed: CompletedIds, env: Envelope) -> None:
        """Persist the id before the ack is queued; a failed write is logged (the ack
        still goes: once it is in Kafka the message is not delivered again anyway)."""
        try:
            completed.record(env.message_id, self._clock_ms())
        except Exception as exc:  # noqa: BLE001 - the store must not lose the ack
            self.stats["dedup_store_errors"] += 1
            log.error("peer %s: could not record message %s in the dedup store: %s",
                      self.peer_id, env.message_id, exc)
