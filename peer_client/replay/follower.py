"""The handover and what follows it: the peer's own txlog partition, read from a replay's
barrier. While catching up (the handover) every Send to the peer is dispatched in txlog
order; afterwards only those not marked as delivered directly to this incarnation
(``Send.direct_incarnation``): see :mod:`tidemark.peer_client.replay.replayer`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tidemark.log.consumer import LogConsumer
from tidemark.log.exceptions import CodecError, LogError
from tidemark.log.settings import Settings
from tidemark.log.wire import RecordReader, direct_mark
from tidemark.peer_client.context import RUNNING
from tidemark.peer_client.core import PeerCore
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.records import Envelope, peer_codec
from tidemark.peer_client.replay.tail import Tail

__all__ = ["TxlogFollower", "dispatch_by_floors"]

log = logging.getLogger("peer_client.replay")


def dispatch_by_floors(envs: list[Envelope], inbox: Inbox,
                       dispatch: Callable[[list[Envelope]], None]) -> None:
    """Dispatch the follower's ``envs`` (txlog order), opening each direct batch's floor at
    its place: a batch that waits for the log to pass offset ``floor`` is queued right after
    the Send at ``floor``, before the later ones of ``envs`` (which may be its sender's,
    logged after another failed call)."""
    while envs and inbox.held.floors:
        floor = inbox.next_floor()
        if floor < 0 or floor >= envs[-1].txlog_offset:
            break
        cut = next(i for i, e in enumerate(envs) if e.txlog_offset > floor)
        dispatch(envs[:cut])
        envs = envs[cut:]
        inbox.log_position(floor + 1)
    dispatch(envs)


class TxlogFollower:
    """Reads this peer's txlog partition from ``start`` and dispatches its Sends.

    In catch-up mode (the handover) every Send to the peer is dispatched, in txlog order;
    afterwards only those not marked as delivered directly to the peer's incarnation."""

    def __init__(self, settings: Settings, core: PeerCore, partition: int, start: int,
                 on_forward: Callable[[int], None]) -> None:
        self.core, self.partition, self.position = core, partition, start
        self._key = core.peer_id.encode("utf-8")
        self._mark = direct_mark(core.incarnation)
        self._codec = peer_codec()
        self._reader = RecordReader(self._codec, ("Send",))
        self._on_forward = on_forward
        self.catching_up = True
        self.target = start
        #: the peer's acks, failures and purges past the replay's barrier (a ``covered``
        #: replay), applied while catching up
        self.tail = Tail()
        self.delivery_limit = 5
        self.forwarded = 0
        self.skipped_direct = 0
        #: how long a sender's live messages wait, once normal, for its refused ones
        self.gate_wait_s = 30.0
        self.consumer = LogConsumer(settings, self._codec)
        self.consumer.assign({("txlog", partition): start})
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def step(self, timeout: float = 0.2) -> int:
        """Consume one batch and dispatch its Sends to this peer as one batch (decided under
        one lock, run per sender); returns how many records were read."""
        with self._lock:
            # records_ready: while catching up, a batch short of 2000 is not waited out
            msgs = self.consumer.records_ready(2000, timeout)
            core, key, mark, decode = self.core, self._key, self._mark, self._reader.decode
            catching_up, peer_id, partition = self.catching_up, core.peer_id, self.partition
            envs: list[Envelope] = []
            for msg in msgs:
                off = msg.offset()
                if off is not None:
                    self.position = off + 1
                if msg.key() != key:
                    continue
                value = msg.value()
                if not value:
                    continue
                if not catching_up and value.endswith(mark):
                    self.skipped_direct += 1
                    continue
                try:
                    dec = decode(value)
                except CodecError:
                    continue  # the replicas dead-letter it; nothing to deliver
                if dec.name != "Send" or dec.record.get("recipient") != peer_id:
                    continue
                envs.append(Envelope.from_send(dec.record, True, partition,
                                               off if off is not None else -1))
            if envs and catching_up and self.tail:
                envs = self.tail.admit(envs, self.delivery_limit)
            dispatch_by_floors(envs, core.inbox, self._dispatch)
            if core.inbox.held.floors:  # direct batches waiting for the log to get here
                core.inbox.log_position(self.position)
            return len(msgs)

    def _dispatch(self, envs: list[Envelope]) -> None:
        if envs:
            fresh = self.core.deliver_replayed_batch(envs)
            if fresh:
                self.forwarded += fresh
                self._on_forward(fresh)

    def catch_up(self, target: int, deadline: float | None = None) -> bool:
        """Read until the position reaches txlog offset ``target`` (True); False once
        ``time.monotonic()`` passes ``deadline`` or the follower is stopped."""
        self.target = target
        while self.position < target:
            if self._stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                return False
            self.step()
        return True

    def start(self) -> None:
        """Keep following in a daemon thread until the peer stops."""
        self.catching_up = False
        self.tail = Tail()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"{self.core.peer_id}-txlog-follow")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.core.phase in RUNNING:
            try:
                self.step(0.1)
                inbox = self.core.inbox
                if inbox.held.gates:
                    inbox.expire_gates(self.gate_wait_s)
            except LogError as exc:
                log.error("peer %s txlog follower: %s", self.core.peer_id, exc)
                self._stop.wait(1.0)
            except Exception:  # noqa: BLE001 - keep following
                log.exception("peer %s txlog follower failed", self.core.peer_id)
                self._stop.wait(1.0)

    def halt(self) -> None:
        """Stop following (dispatch nothing more); :meth:`close` closes the consumer."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def close(self) -> None:
        """Stop following and close the consumer."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        with self._lock:
            self.consumer.close()
