"""The uncovered tail: what txlog says about a peer's queue past a replay's barrier.

A replay may start on what the queues job already covers (``ReplicaReplayer(covered=True)``)
instead of waiting for the job to reach the txlog end. The queue entries below that barrier
are then as the job saw them, not as they are: in the stretch of txlog the job has not read
yet (the *tail*, from the barrier to the end at the replay's start) the peer's previous
incarnation may have acked some of them, failed some (a fifth failure dead-letters a
message), or an operator may have purged the queue. :class:`Tail` folds the peer's own
records of that stretch (they share the peer's key, so its partition) and
:meth:`Tail.admit` applies them to what the replay and the handover are about to deliver,
as the queues job would have: acked ids are not delivered, dead-lettered ones neither, a
purge removes every Send logged before it, and a delivery count includes the failures of the
tail. Pure: the reading is :func:`tidemark.peer_client.replay.replayer.read_tail`.

An Ack or a DeliveryFailed can precede its Send in txlog (the recipient handled a direct
delivery and acked or failed it before the sender appended the Send, which it does after
the receipt). So the acks and failures of a *look-back* stretch before the barrier count
too (``fold(..., acks_only=True)``), for the Sends past the barrier: without them a Send
just past the barrier whose ack is just before it would be delivered again. A failure
before the barrier of a Send before it is already in the entry's delivery count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.peer_client.records import Envelope

__all__ = ["Tail"]


@dataclass
class Tail:
    """This peer's Acks, DeliveryFailed and Purges in txlog ``[start, end)``."""

    start: int = 0
    end: int = 0
    acked: set[str] = field(default_factory=set)
    #: txlog offsets of each message's DeliveryFailed records in the tail
    failures: dict[str, list[int]] = field(default_factory=dict)
    #: txlog offset of each message's terminal DeliveryFailed (its handler's ``term``)
    terminated: dict[str, int] = field(default_factory=dict)
    #: Sends logged below this offset were purged (-1: no Purge in the tail)
    purged_below: int = -1
    records: int = 0  #: the peer's records folded

    def fold(self, name: str, record: Mapping[str, Any], offset: int,
             acks_only: bool = False) -> None:
        """One of the peer's records at txlog ``offset`` (other kinds are ignored);
        ``acks_only``: a record of the look-back stretch before the tail (its acks and
        failures count, a purge does not)."""
        if name == "AckBatch":
            self.acked.update(record["message_ids"])
        elif name == "Ack":
            self.acked.add(record["message_id"])
        elif name == "DeliveryFailed":
            self.failures.setdefault(record["message_id"], []).append(offset)
            if record.get("terminal"):
                self.terminated[record["message_id"]] = offset  # the last one
        elif acks_only:
            return
        elif name == "Purge":  # from purges: ``offset`` is where it reaches in txlog
            self.purged_below = max(self.purged_below, offset)
        else:
            return
        self.records += 1

    def __bool__(self) -> bool:
        return bool(self.acked or self.failures or self.purged_below >= 0)

    def admit(self, envs: Sequence[Envelope], delivery_limit: int) -> list[Envelope]:
        """``envs`` minus what the tail acked, dead-lettered or purged; the others with
        their delivery counts raised by the tail's failures."""
        if not self:
            return list(envs)
        acked, failures, purged, start = self.acked, self.failures, self.purged_below, self.start
        out: list[Envelope] = []
        for env in envs:
            mid = env.message_id
            if mid in acked or 0 <= env.txlog_offset < purged:
                continue
            offsets = failures.get(mid)
            if offsets:  # unless the job counted it already: both before the barrier
                past = env.txlog_offset >= start
                failed = sum(1 for o in offsets if past or o >= start)
                term = self.terminated.get(mid, -1)
                if env.delivery_count + failed >= delivery_limit or \
                        (term >= 0 and (past or term >= start)):
                    continue  # the queues job dead-letters it once it reads the tail
                env.delivery_count += failed
            out.append(env)
        return out
