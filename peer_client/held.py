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
ids of refused persistent messages are remembered until their logged copy goes by, and the
handover does not end before that (:meth:`HeldBack.unseen`): otherwise a refused message,
read by the follower after the handover, could be handled after a later message of its
sender delivered directly once the peer is normal.

Not thread-safe on its own: the :class:`~tidemark.peer_client.inbox.Inbox` calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tidemark.peer_client.records import Envelope

__all__ = ["HeldBack"]


class HeldBack:
    """Held-back live messages by id, in arrival order, with their payload bytes."""

    __slots__ = ("limit", "limit_bytes", "_msgs", "bytes", "peak", "peak_bytes", "refused",
                 "superseded", "_refused_ids")

    def __init__(self, limit: int, limit_bytes: int) -> None:
        self.limit, self.limit_bytes = limit, limit_bytes
        self._msgs: dict[str, Envelope] = {}
        self.bytes = 0
        self.peak = self.peak_bytes = 0
        self.refused = 0       #: messages refused because the list was full
        self.superseded = 0    #: held copies dropped because their logged copy went by
        self._refused_ids: set[str] = set()  # refused persistent ids not seen in the log

    def __len__(self) -> int:
        return len(self._msgs)

    def __bool__(self) -> bool:
        return bool(self._msgs)

    @property
    def watching(self) -> bool:
        """Whether a logged copy going by matters (messages held, or refused ids)."""
        return bool(self._msgs or self._refused_ids)

    def room(self, n: int, nbytes: int) -> bool:
        """Whether ``n`` more messages of ``nbytes`` payload fit (an empty list always takes
        one batch, so a single batch larger than the bounds is not refused forever)."""
        if not self._msgs:
            return True
        return len(self._msgs) + n <= self.limit and self.bytes + nbytes <= self.limit_bytes

    def refuse(self, n: int, persistent_ids: Iterable[str] = ()) -> None:
        """Count ``n`` messages refused for lack of room; remember the persistent ones'
        ids until their logged copy goes by."""
        self.refused += n
        self._refused_ids.update(persistent_ids)

    def add(self, env: Envelope) -> bool:
        """Hold ``env``; False if a message with its id is already held (a duplicate)."""
        msgs = self._msgs
        if env.message_id in msgs:
            return False
        msgs[env.message_id] = env
        self.bytes += len(env.payload)
        if len(msgs) > self.peak:
            self.peak = len(msgs)
        if self.bytes > self.peak_bytes:
            self.peak_bytes = self.bytes
        return True

    def seen(self, message_id: str) -> bool:
        """The logged copy of ``message_id`` is being dispatched: drop the held one (True if
        there was one)."""
        if self._refused_ids:
            self._refused_ids.discard(message_id)
        env = self._msgs.pop(message_id, None)
        if env is None:
            return False
        self.bytes -= len(env.payload)
        self.superseded += 1
        return True

    def persistent(self) -> list[Envelope]:
        """Held persistent messages (their logged copy has not gone by yet)."""
        return [e for e in self._msgs.values() if e.persistent]

    def unseen(self) -> int:
        """Persistent messages held or refused whose logged copy has not gone by yet."""
        return sum(1 for e in self._msgs.values() if e.persistent) + len(self._refused_ids)

    def unseen_ids(self) -> set[str]:
        """The ids :meth:`unseen` counts (a snapshot the handover waits on)."""
        return {i for i, e in self._msgs.items() if e.persistent} | self._refused_ids

    def still_unseen(self, ids: Iterable[str]) -> set[str]:
        """Those of ``ids`` whose logged copy has not gone by yet."""
        msgs, refused = self._msgs, self._refused_ids
        return {i for i in ids if i in msgs or i in refused}

    def forget_refused(self) -> None:
        """Stop waiting for the refused ids (the handover gave up on them)."""
        self._refused_ids.clear()

    def take(self) -> list[Envelope]:
        """Every held message, in arrival order; the list is empty afterwards."""
        out = list(self._msgs.values())
        self._msgs.clear()
        self.bytes = 0
        return out

    def envelopes(self) -> list[Envelope]:
        """A snapshot of the held messages, in arrival order."""
        return list(self._msgs.values())

    def status(self) -> dict[str, Any]:
        """Counts for ``Peer.status()["held"]`` and the metrics."""
        return {"messages": len(self._msgs), "bytes": self.bytes, "peak_messages": self.peak,
                "peak_bytes": self.peak_bytes, "limit_messages": self.limit,
                "limit_bytes": self.limit_bytes, "refused": self.refused,
                "refused_unseen": len(self._refused_ids), "superseded": self.superseded}
