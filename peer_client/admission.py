"""Admission: what the :class:`~tidemark.peer_client.inbox.Inbox` does with each decision of
:mod:`tidemark.peer_client.decisions`, under the inbox lock and without I/O (a rejected
message is only logged): a message is held back (behind its sender's gate, or during
replay), dropped and counted, or comes back to be run, reported, or acked (completed by an
earlier incarnation).

:class:`Admission` keeps the counts the inbox's submitting side reads: how many messages were
admitted and not yet submitted (the peer stopping waits for none), how many were dropped as
duplicates. It submits nothing and calls no handler; the inbox does, outside this.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

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
from tidemark.peer_client.handlers import Handler, HandlerRegistry
from tidemark.peer_client.held import HeldBack
from tidemark.peer_client.records import Envelope

__all__ = ["Admission", "Todo"]

log = logging.getLogger("peer_client.inbox")
#: What :meth:`Admission.apply_many` returns per message: ``(env, handler, message)`` to
#: run, ``(env, None, decision)`` otherwise.
Todo = tuple[Envelope, "Handler | None", Any]


class Admission:
    """Applies decisions under the inbox lock: holds back, counts, or returns what to do."""

    def __init__(self, environment: str, handlers: HandlerRegistry, dedup: DedupWindow,
                 held: HeldBack, stats: dict[str, int]) -> None:
        """``held`` and ``stats`` are the inbox's."""
        self.environment, self.handlers, self.dedup = environment, handlers, dedup
        self.held, self.stats = held, stats
        #: the persisted dedup store (None: off)
        self.completed: CompletedIds | None = None
        self.admitting = 0  # decided to RUN (or to ack), not yet submitted
        self.duplicates = 0  # dropped as duplicates
        self.queue_now = False  # apply_many let held messages go: queue under the lock

    def apply(self, env: Envelope, phase: Phase) -> Decision | None:
        """Decide under the lock and count; None when the message is held or dropped for
        good, else a FAIL, a RUN or a DROP ``completed`` (to be acked) to act on."""
        held = self.held
        if env.replay:
            if held.watching:
                held.seen(env.message_id)
        elif (held.gates and env.sender in held.gates and phase not in STOPPED_PHASES
              and env.environment == self.environment):
            return self.count(env, Decision(HOLD))  # behind its sender's refused ones
        return self.count(env, decide(env, phase, self.environment, self.dedup, self.handlers,
                                      self.completed))

    def count(self, env: Envelope, d: Decision) -> Decision | None:
        """:meth:`apply` once ``d`` is decided."""
        if d.action == RUN:  # the common case first (the last branch below covers it too)
            self.admitting += 1
            return d
        if d.action == HOLD:
            if self.held.add(env):
                self.stats["held_back"] += 1
            else:
                self.stats["duplicates"] += 1
                self.duplicates += 1
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
                    self.duplicates += 1
                return None
            self.stats["completed_before"] += 1
        if d.action == FAIL:
            self.stats[d.kind] += 1
            self.dedup.forget(env.message_id)
        else:
            self.admitting += 1  # to run, or (completed before) to ack
        return d

    def apply_many(self, envs: Sequence[Envelope], phase: Phase) -> list[Todo]:
        """:meth:`apply` of each of ``envs``, the phase asked once. A message to run comes
        back as ``(env, handler, message)``, any other as ``(env, None, decision)``. A
        message of this environment that the phase lets in is decided inline (dedup, handler,
        payload: what :func:`decide_admitted` does, without a Decision per message); anything
        unusual (no handler, a payload that does not decode, the dedup store) goes through
        :func:`decide`."""
        environment, dedup, handlers = self.environment, self.dedup, self.handlers
        completed, count = self.completed, self.count
        stopped = phase in STOPPED_PHASES
        live_held = phase is Phase.REPLAY  # live messages are held back during replay
        check, handler_of = dedup.check_and_add, handlers.get
        held = self.held if self.held.watching else None
        gates = self.held.gates
        todo: list[Todo] = []
        append = todo.append
        runs = dups = 0
        for env in envs:
            if held is not None and env.replay:
                held.seen(env.message_id)  # its held copy is superseded by this logged one
                if held.opened:  # a sender's refused copies went by: what it held follows
                    d = count(env, decide(env, phase, environment, dedup, handlers, completed))
                    if d is not None:
                        append((env, d.handler, d.message) if d.action == RUN else (env, None, d))
                    todo.extend(self.opened_todo(phase))
                    self.queue_now = True  # the caller queues todo under the lock
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
        self.admitting += runs
        if dups:
            self.duplicates += dups
            self.stats["duplicates"] += dups
        return todo

    def opened_todo(self, phase: Phase) -> list[Todo]:
        """Under the lock: the held messages that gates just opened let go (none during
        replay: everything held waits for the release then), decided for ``phase``."""
        held = self.held
        senders, held.opened = held.opened, []
        if phase is Phase.REPLAY or phase in STOPPED_PHASES or not senders:
            return []
        return self.decide_released(held.take_open(senders), phase)

    def decide_released(self, envs: list[Envelope], phase: Phase) -> list[Todo]:
        """Under the lock: held messages let go, decided for ``phase`` (no gate: they are
        the ones it let through)."""
        out: list[Todo] = []
        for env in envs:
            d = self.count(env, decide(env, phase, self.environment, self.dedup,
                                       self.handlers, self.completed))
            if d is not None:
                out.append((env, d.handler, d.message) if d.action == RUN else (env, None, d))
        return out

    def apply_ids(self, ids: list[str], phase: Phase) -> list[int] | None:
        """A replayed chunk's ``ids`` (all of this environment, every handler plain) checked
        against the dedup window at once: the positions of the duplicates (the rest count
        as admitted), or None, nothing done, when ``phase`` is a stopping one or the
        held-back list watches for one of ``ids``."""
        held = self.held
        if phase in STOPPED_PHASES or (held.watching and held.watches_any(ids)):
            return None
        dups = self.dedup.check_and_add_many(ids)
        self.admitting += len(ids) - len(dups)
        if dups:
            self.duplicates += len(dups)
            self.stats["duplicates"] += len(dups)
        return dups

    def submitted(self, n: int) -> bool:
        """``n`` admitted messages were submitted (or acked, or reported): whether none is
        left admitted and not submitted."""
        self.admitting -= n
        return not self.admitting
