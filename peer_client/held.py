"""Live messages held back while the peer replays: bounded, and each one handled once.

During replay a live message (direct delivery) is not handled: it waits here, in arrival
order, until the replay and the handover have dispatched everything logged before it. Most
held messages are persistent and so also in txlog; when their logged copy goes by (in the
replay or the handover) that copy is dispatched in txlog order, and the held copy is dropped
here (:meth:`HeldBack.seen`). What is left at the end is released. So a held message is
handed to a handler once, whether or not the dedup window still remembers its id (a replay
longer than the window used to hand the held copy over a second time).

The list is bounded by count and bytes (``PeerOptions.hold_limit`` / ``hold_bytes``): a
direct batch that would overflow it is refused with a receipt, and the sender appends those
messages to txlog unmarked, from where the handover (or the follower afterwards) delivers
them. Nothing is lost by a refusal; it costs a log round trip instead of a direct one. The
ids of refused persistent messages are remembered, by sender, until their logged copy goes
by: until then the sender is *gated*. A gated sender's later live messages stay held, also
after the replay (the peer is normal, the follower reads on), and are dispatched right
after the last refused copy, when it goes by (:attr:`HeldBack.opened`); otherwise a refused
message, read by the follower after the handover, would be handled after a later message of
its sender delivered directly. A gate whose copies never come (the sender died before its
append) opens after a wait (:meth:`HeldBack.expire`). A *floor* gate (a direct batch whose
sender's earlier messages took the log, :meth:`HeldBack.gate_floor`) never times out: Kafka
confirmed those copies, so they do come, and opening it early on a slow follower would hand
the sender's later messages over before them.

Not thread-safe on its own: the :class:`~tidemark.peer_client.inbox.Inbox` calls it under its lock.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from typing import Any

from tidemark.peer_client.records import Envelope

__all__ = ["HeldBack"]


class HeldBack:
    """Held-back live messages by id, in arrival order, with their payload bytes."""

    __slots__ = ("limit", "limit_bytes", "_msgs", "bytes", "peak", "peak_bytes", "refused",
                 "superseded", "_refused", "_unseen", "_next_seq", "_need", "_gate_since",
                 "opened", "floors")

    def __init__(self, limit: int, limit_bytes: int) -> None:
        self.limit, self.limit_bytes = limit, limit_bytes
        self._msgs: dict[str, Envelope] = {}
        self.bytes = 0
        self.peak = self.peak_bytes = 0
        self.refused = 0       #: messages refused because the list was full
        self.superseded = 0    #: held copies dropped because their logged copy went by
        #: a refused persistent id not seen in the log: (sender, its refusal number)
        self._refused: dict[str, tuple[str, int]] = {}
        self._unseen: dict[str, deque[int]] = {}  # gated sender: its unseen refusal numbers
        self._next_seq: dict[str, int] = {}      # sender: its next refusal number
        self._need: dict[str, int] = {}  # held id: refusals of its sender it must follow
        self._gate_since: dict[str, float] = {}  # gated sender: when its gate closed
        #: (txlog offset, gate id) of direct batches that wait for the follower to pass it
        self.floors: list[tuple[int, str]] = []
        #: senders whose gate opened (their last refused copy went by) since the inbox looked
        self.opened: list[str] = []

    def __len__(self) -> int:
        return len(self._msgs)

    def __bool__(self) -> bool:
        return bool(self._msgs)

    @property
    def watching(self) -> bool:
        """Whether a logged copy going by matters (messages held, or refused ids)."""
        return bool(self._msgs or self._refused)

    def room(self, n: int, nbytes: int) -> bool:
        """Whether ``n`` more messages of ``nbytes`` payload fit (an empty list always takes
        one batch, so a single batch larger than the bounds is not refused forever)."""
        if not self._msgs:
            return True
        return len(self._msgs) + n <= self.limit and self.bytes + nbytes <= self.limit_bytes

    def refuse(self, n: int, persistent_ids: Iterable[str] = (), sender: str = "",
               now: float = 0.0) -> None:
        """Count ``n`` messages refused for lack of room; remember the persistent ones'
        ids until their logged copy goes by (``sender`` is gated until then)."""
        self.refused += n
        refused = self._refused
        for i in persistent_ids:
            if i not in refused:
                seq = self._next_seq.get(sender, 0)
                self._next_seq[sender] = seq + 1
                refused[i] = (sender, seq)
                unseen = self._unseen.get(sender)
                if unseen is None:
                    unseen = self._unseen[sender] = deque()
                    self._gate_since[sender] = now
                unseen.append(seq)

    def gate_floor(self, sender: str, floor: int, now: float = 0.0) -> None:
        """``sender``'s next messages wait until the follower has dispatched txlog up to
        offset ``floor`` (its messages that took the log after a failed direct call)."""
        gate_id = f"@{sender}@{floor}"
        self.refuse(0, (gate_id,), sender, now)
        heapq.heappush(self.floors, (floor, gate_id))

    def pass_floor(self, position: int) -> None:
        """The follower dispatched txlog below ``position``: open the floors under it."""
        floors = self.floors
        while floors and floors[0][0] < position:
            _, gate_id = heapq.heappop(floors)
            self.seen(gate_id)

    def gated(self, sender: str) -> bool:
        """Whether ``sender`` has refused messages whose logged copy has not gone by."""
        return sender in self._unseen

    @property
    def gates(self) -> dict[str, deque[int]]:
        """The gated senders (read-only, for the inbox's fast path)."""
        return self._unseen

    def add(self, env: Envelope) -> bool:
        """Hold ``env``; False if a message with its id is already held (a duplicate)."""
        msgs = self._msgs
        if env.message_id in msgs:
            return False
        msgs[env.message_id] = env
        need = self._next_seq.get(env.sender)
        if need:
            self._need[env.message_id] = need  # it follows its sender's refusals so far
        self.bytes += len(env.payload)
        if len(msgs) > self.peak:
            self.peak = len(msgs)
        if self.bytes > self.peak_bytes:
            self.peak_bytes = self.bytes
        return True

    def watches_any(self, message_ids: Iterable[str]) -> bool:
        """Whether :meth:`seen` of one of ``message_ids`` would change anything (a held copy
        or a refused id among them)."""
        ids = message_ids if isinstance(message_ids, (set, frozenset)) else set(message_ids)
        return not (self._msgs.keys().isdisjoint(ids) and self._refused.keys().isdisjoint(ids))

    def seen(self, message_id: str) -> bool:
        """The logged copy of ``message_id`` is being dispatched: drop the held one (True if
        there was one); a refused one's sender may be ungated (see :attr:`opened`)."""
        if self._refused:
            ref = self._refused.pop(message_id, None)
            if ref is not None:
                sender, seq = ref
                unseen = self._unseen[sender]
                unseen.remove(seq)  # the first, but for a copy read out of turn
                if not unseen:
                    del self._unseen[sender]
                    self._gate_since.pop(sender, None)
                self.opened.append(sender)
        env = self._msgs.pop(message_id, None)
        if env is None:
            return False
        self._need.pop(message_id, None)
        self.bytes -= len(env.payload)
        self.superseded += 1
        return True

    def expire(self, now: float, wait_s: float) -> list[str]:
        """Open the gates closed before ``now - wait_s`` (their refused copies never came),
        but not a sender's while it waits for a floor (its copies are in txlog); returns
        those senders (also appended to :attr:`opened`)."""
        refused = self._refused
        floored = {refused[g][0] for _, g in self.floors if g in refused}
        old = [s for s, t in self._gate_since.items()
               if now - t >= wait_s and s not in floored]
        if old:
            gone = set(old)
            for i in [i for i, (s, _) in self._refused.items() if s in gone]:
                del self._refused[i]
            self.floors = [f for f in self.floors if f[1] in self._refused]
            heapq.heapify(self.floors)
            for sender in old:
                del self._unseen[sender]
                del self._gate_since[sender]
            self.opened.extend(old)
        return old

    def persistent(self) -> list[Envelope]:
        """Held persistent messages (their logged copy has not gone by yet)."""
        return [e for e in self._msgs.values() if e.persistent]

    def unseen(self) -> int:
        """Persistent messages held or refused whose logged copy has not gone by yet."""
        return sum(1 for e in self._msgs.values() if e.persistent) + len(self._refused)

    def unseen_ids(self) -> set[str]:
        """The ids :meth:`unseen` counts (a snapshot the handover waits on)."""
        return {i for i, e in self._msgs.items() if e.persistent} | set(self._refused)

    def still_unseen(self, ids: Iterable[str]) -> set[str]:
        """Those of ``ids`` whose logged copy has not gone by yet."""
        msgs, refused = self._msgs, self._refused
        return {i for i in ids if i in msgs or i in refused}

    def forget_refused(self) -> None:
        """Stop waiting for every refused id: each gate opens (see :attr:`opened`)."""
        self._refused.clear()
        self.floors.clear()
        self.opened.extend(self._unseen)
        self._unseen.clear()
        self._gate_since.clear()

    def take(self) -> list[Envelope]:
        """Every held message, in arrival order; the list is empty afterwards."""
        out = list(self._msgs.values())
        self._msgs.clear()
        self._need.clear()
        self.bytes = 0
        return out

    def take_open(self, senders: Iterable[str] | None = None) -> list[Envelope]:
        """The held messages that follow no unseen refusal of their sender (only of
        ``senders``, if given), in arrival order; from a sender's first one that does, its
        later ones stay too."""
        msgs, need, unseen = self._msgs, self._need, self._unseen
        only = None if senders is None else set(senders)
        blocked: set[str] = set()
        out: list[Envelope] = []
        for mid, e in msgs.items():
            s = e.sender
            if (only is not None and s not in only) or s in blocked:
                continue
            low = unseen.get(s)
            if low and need.get(mid, 0) > low[0]:
                blocked.add(s)
                continue
            out.append(e)
        for e in out:
            del msgs[e.message_id]
            need.pop(e.message_id, None)
            self.bytes -= len(e.payload)
        return out

    def envelopes(self) -> list[Envelope]:
        """A snapshot of the held messages, in arrival order."""
        return list(self._msgs.values())

    def status(self) -> dict[str, Any]:
        """Counts for ``Peer.status()["held"]`` and the metrics."""
        return {"messages": len(self._msgs), "bytes": self.bytes, "peak_messages": self.peak,
                "peak_bytes": self.peak_bytes, "limit_messages": self.limit,
                "limit_bytes": self.limit_bytes, "refused": self.refused,
                "refused_unseen": len(self._refused), "gated_senders": len(self._unseen),
                "superseded": self.superseded}
