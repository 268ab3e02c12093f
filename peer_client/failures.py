"""What becomes of a message the inbox does not ack: a refusal or a handler's failure is
reported (not acked); a nak is delivered again here after its delay.

A message whose handler raised leaves the dedup window (a later copy runs) unless the handler
terminated it (:class:`~tidemark.peer_client.exceptions.Term`: it stays, not run again here).
A nak (:class:`~tidemark.peer_client.exceptions.Nak`) is reported too and scheduled to run
again here (its id stays in the window meanwhile), until the queues' delivery limit, the peer
stopping, or its handler gone; the waiting timers are kept by id so a stopping peer cancels
them. A collaborator of the :class:`~tidemark.peer_client.inbox.Inbox`: it shares the inbox's
lock and stats, and reads its phase and handlers through the callables it is given.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tidemark.log.registry import env_value
from tidemark.peer_client.acks import TERM
from tidemark.peer_client.decisions import Decision
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.exceptions import Nak, Term
from tidemark.peer_client.handlers import Handler
from tidemark.peer_client.records import Envelope
from tidemark.peer_client.timers import Cancellable, thread_timer

__all__ = ["Failures"]

log = logging.getLogger("peer_client.inbox")


class Failures:
    """Reports what is not acked and delivers nak'ed messages again after their delay."""

    def __init__(self, peer_id: str, stats: dict[str, int], lock: threading.Lock,
                 dedup: DedupWindow, on_failure: Callable[[Envelope, str, str], None],
                 handler_of: Callable[[str], Handler | None], stopped: Callable[[], bool],
                 resubmit: Callable[[Envelope, Handler, Any], None]) -> None:
        """``lock`` and ``stats`` are the inbox's; ``handler_of`` names a type's handler now,
        ``stopped`` says whether the peer gave up or is stopping, ``resubmit`` queues a
        delivery again (an inbox slot taken)."""
        self.peer_id, self.stats, self._lock, self._dedup = peer_id, stats, lock, dedup
        self._on_failure, self._handler_of = on_failure, handler_of
        self._stopped, self._resubmit = stopped, resubmit
        #: the queues' delivery limit: a nak that reaches it is not delivered again here
        #: (the queues dead-letter the message), like any failure
        self.delivery_limit = int(env_value("delivery_limit"))
        #: runs a function after a delay in seconds (the test double: on the bus's clock)
        self.schedule: Callable[[float, Callable[[], None]], Cancellable] = thread_timer
        self._naks: dict[str, Cancellable] = {}  # nak'ed messages waiting, by id

    def report(self, env: Envelope, d: Decision) -> None:
        """A FAIL decision (no handler, a payload that does not decode): reported, not run."""
        log.warning("peer %s: %s (message %s from %s) - not acked, reported",
                    self.peer_id, d.reason, env.message_id, env.sender)
        self._on_failure(env, d.reason, d.kind)

    def failed(self, env: Envelope, error: BaseException) -> None:
        """The handler of ``env`` raised ``error``: nak'ed, terminated, or failed."""
        if isinstance(error, Nak) and self._nak(env, error):
            return
        term = isinstance(error, Term)
        with self._lock:
            if term:
                self.stats["terminated"] += 1  # stays in dedup: not run again here
            else:
                self._dedup.forget(env.message_id)
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
        handler = self._handler_of(env.message_type)
        count = env.delivery_count + 1
        if handler is None or count >= self.delivery_limit or self._stopped():
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
        if self._stopped():
            return
        try:
            message = handler.message_type.serializer.decode(env.payload)
        except Exception as exc:  # noqa: BLE001 - it decoded before; report, never raise here
            self.failed(env, exc)
            return
        self._resubmit(env, handler, message)

    def waiting(self) -> int:
        """Messages nak'ed and waiting for their delay."""
        with self._lock:
            return len(self._naks)

    def cancel(self) -> int:
        """Stop every nak's wait (the peer stops: those messages are not acked, the next
        incarnation gets them); returns how many."""
        with self._lock:
            timers, self._naks = list(self._naks.values()), {}
        for t in timers:
            t.cancel()
        return len(timers)
