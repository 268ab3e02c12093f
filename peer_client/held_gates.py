"""The held-back list's gates as the peer drives them, under the inbox lock: room for a
direct batch (or its refusal, which gates its sender), a direct batch waiting for the
follower to pass a txlog floor, the follower's log position, gates that expire, and the
counts the handover and ``Peer.status()`` read.

:class:`~tidemark.peer_client.held.HeldBack` keeps the state (not thread-safe on its own);
this takes the :class:`~tidemark.peer_client.inbox.Inbox`'s lock around it, and when a gate
opens hands what it held back to the inbox (``let_go`` under the lock, queued on the senders'
lanes in the same step; ``finish`` outside it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tidemark.peer_client.context import Phase
from tidemark.peer_client.decisions import Decision
from tidemark.peer_client.held import HeldBack
from tidemark.peer_client.records import Envelope

__all__ = ["HeldGates"]

log = logging.getLogger("peer_client.inbox")

#: what ``let_go`` leaves to ``finish``: failures and completed-before messages to ack
_Others = list[tuple[Envelope, Decision]]


class HeldGates:
    """Opens and closes the held-back list's gates, under the inbox lock."""

    def __init__(self, peer_id: str, held: HeldBack, lock: threading.Lock,
                 stats: dict[str, int], phase: Callable[[], Phase],
                 let_go: Callable[[], tuple[int, _Others]],
                 finish: Callable[[_Others], None]) -> None:
        """``held``, ``lock`` and ``stats`` are the inbox's; ``phase`` is its phase now;
        ``let_go`` (under the lock) queues what the opened gates let go and returns how
        many went and the rest for ``finish`` (outside the lock)."""
        self.peer_id, self.held, self._lock, self.stats = peer_id, held, lock, stats
        self._phase, self._let_go, self._finish = phase, let_go, finish
        self._log_position = -1  # the follower dispatched txlog below this (when reported)

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
            _, others = self._let_go()
        self._finish(others)

    def expire(self, wait_s: float) -> int:
        """Open the gates of senders whose refused copies have not come for ``wait_s``
        (the sender may have died before its append) and dispatch what they held; returns
        how many messages went."""
        with self._lock:
            senders = self.held.expire(time.monotonic(), wait_s)
            if not senders:
                return 0
            went, others = self._let_go()
        self._finish(others)
        log.warning("peer %s: refused messages of %s not seen in txlog within %.0f s;"
                    " releasing %d message(s) held behind them", self.peer_id,
                    ", ".join(sorted(senders)), wait_s, went)
        return went

    def hold_room(self, n: int, nbytes: int, persistent_ids: Sequence[str] = (),
                  sender: str = "") -> bool:
        """Whether a direct batch of ``n`` messages (``nbytes`` of payload) from ``sender``
        may be held back now; counts them as refused if not (and remembers
        ``persistent_ids`` until their logged copies go by: ``sender`` is gated until then).
        True when nothing is held: outside replay, unless ``sender`` is gated."""
        with self._lock:
            held = self.held
            if ((self._phase() is not Phase.REPLAY and sender not in held.gates)
                    or held.room(n, nbytes)):
                return True
            held.refuse(n, persistent_ids, sender, time.monotonic())
            self.stats["refused_held_full"] += n
            return False

    def forget_refused(self) -> None:
        """Stop waiting for refused messages' logged copies: every gate opens, and outside
        replay what the gated senders held goes now."""
        with self._lock:
            self.held.forget_refused()
            _, others = self._let_go()
        self._finish(others)

    def unseen(self) -> int:
        """Held-back or refused persistent messages whose logged copy has not gone by."""
        with self._lock:
            return self.held.unseen()

    def unseen_ids(self) -> set[str]:
        """The ids :meth:`unseen` counts."""
        with self._lock:
            return self.held.unseen_ids()

    def still_unseen(self, ids: set[str]) -> set[str]:
        """Those of ``ids`` whose logged copy has not gone by yet."""
        with self._lock:
            return self.held.still_unseen(ids)

    def status(self) -> dict[str, Any]:
        """The held-back list's counts (``Peer.status()["held"]``)."""
        with self._lock:
            return self.held.status()
