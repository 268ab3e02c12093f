"""The lean replay path's intake: a replayed chunk kept as columns
(:class:`~tidemark.peer_client.columns.Columns`) taken in bulk, with the general path's
decisions (one decode loop per type, one dedup call, one job per sender's run).

The chunk goes the general path instead (:meth:`ColumnIntake.accept` returns None, having
done nothing) when anything in it needs a decision of its own: no batch executor, the
persisted dedup store, a type without a plain handler, a payload that does not decode, the
peer stopping, or an id the held-back list watches for. A collaborator of the
:class:`~tidemark.peer_client.inbox.Inbox`: the inbox admits the ids under its lock
(``admit``), the runs finish in :meth:`~tidemark.peer_client.finishing.Finisher.columns`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidemark.peer_client.columns import Columns, sender_runs
from tidemark.peer_client.decisions import CompletedIds
from tidemark.peer_client.handlers import Handler, HandlerRegistry
from tidemark.peer_client.jobs import ColumnRun
from tidemark.peer_client.serializers import decode_all
from tidemark.peer_client.slots import Slots

__all__ = ["ColumnIntake"]


class ColumnIntake:
    """Decodes a replayed chunk kept as columns and submits one job per sender's run."""

    def __init__(self, peer_id: str, batched: bool, slots: Slots | None,
                 submit: Callable[[str, Any], None], timed: Callable[[ColumnRun, int], Any],
                 admit: Callable[[list[str]], list[int] | None],
                 admitted_done: Callable[[int], None],
                 done: Callable[[ColumnRun, dict[int, BaseException], int], None],
                 cancelled: Callable[[], bool]) -> None:
        """``batched``: the executor takes runs (else every chunk goes the general path).
        ``admit`` checks a chunk's ids under the inbox lock (the positions of duplicates,
        or None: the general path), ``admitted_done`` ends that admission once submitted;
        ``done`` finishes a run, ``cancelled`` says the peer gave up on queued work."""
        self.peer_id, self._batched, self._slots = peer_id, batched, slots
        self._submit, self._timed = submit, timed
        self._admit, self._admitted_done = admit, admitted_done
        self._done, self._cancelled = done, cancelled

    def accept(self, cols: Columns, handlers: HandlerRegistry,
               completed: CompletedIds | None) -> int | None:
        """Take ``cols`` (``handlers`` and the persisted dedup store ``completed`` as they
        are now): how many were not dropped as duplicates, or None (nothing done: the
        chunk needs the general path)."""
        if not self._batched or completed is not None or not len(cols):
            return None
        handler_of = handlers.get
        kinds: dict[str, Handler] = {}
        for name in set(cols.types):
            h = handler_of(name)
            if h is None or h.is_async:
                return None
            kinds[name] = h
        try:  # outside the lock: the general path says which payload is bad, and why
            if len(kinds) == 1:
                h = next(iter(kinds.values()))
                run_handlers = [h] * len(cols)
                messages = decode_all(h.message_type.serializer, cols.payloads)
            else:
                run_handlers = [kinds[name] for name in cols.types]
                messages = [h.message_type.serializer.decode(p)
                            for h, p in zip(run_handlers, cols.payloads, strict=True)]
        except Exception:  # noqa: BLE001 - a user serializer may raise anything
            return None
        dups = self._admit(cols.ids)
        if dups is None:
            return None
        fresh = len(cols) - len(dups)
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
                            cols, part, run_handlers, messages, self.peer_id,
                            self._done, self._cancelled), k))
                    except BaseException:
                        if slots is not None:
                            slots.give(k)  # not submitted: nothing will give them back
                        raise
                    at += k
        finally:
            if fresh:
                self._admitted_done(fresh)
        return fresh
