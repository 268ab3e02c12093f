"""An in-memory bus for tests, with failures: crash a peer mid-handler, duplicate a delivery,
restart a peer (which replays what it had not acked), stall the replicas.

    bus = TestBus(environment="test")
    a, b = bus.peer("A"), bus.peer("B")

    @b.handler
    def on_order(msg: OrderPlaced, ctx: MessageContext) -> None: ...

    a.send("B", OrderPlaced("o-1", 100))    # handled before send returns (auto_run)
    bus.crash_next("B")                      # B's next handler crashes midway: no ack
    a.send("B", OrderPlaced("o-2", 200))
    b = bus.restart("B")                     # o-2 is replayed (ctx.replay, delivery_count)

Each peer is the library's real core (the same send, receive, dedup, ack and failure logic as
:class:`tidemark.peer_client.Peer`) over in-memory ports. Everything runs on the calling thread: a
message is queued when sent and handled by :meth:`TestBus.run_until_idle`, which the bus calls
after every top-level call unless ``auto_run=False``. The bus keeps the txlog it was given
(:attr:`TestBus.records`) and derives each peer's unacked queue from it, as the real queues do.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tidemark.log.partitioner import partition_for_peer
from tidemark.log.queue_fold import QueueFold, events_of
from tidemark.log.queue_state import DEFAULT_DELIVERY_LIMIT, Ttl
from tidemark.peer_client.context import RUNNING, Phase
from tidemark.peer_client.exceptions import PeerUnreachableError
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.records import Envelope, peer_codec
from tidemark.peer_client.testing_peer import TestPeer, _Msg

__all__ = ["TestBus", "TestPeer", "SimulatedCrash", "LoggedRecord"]


class SimulatedCrash(BaseException):
    """Raised inside a handler to crash its peer (not an Exception: handlers cannot catch it
    by accident with ``except Exception``)."""


@dataclass(frozen=True)
class LoggedRecord:
    """One record of the in-memory txlog."""

    partition: int
    offset: int
    key: str
    name: str
    record: dict[str, Any]


class TestBus:
    """Peers, a directory and a txlog, all in memory and single-threaded."""

    __test__ = False

    def __init__(self, environment: str = "test", *, options: PeerOptions | None = None,
                 partitions: int = 12, max_message_bytes: int = 1_000_000,
                 auto_run: bool = True, start_ms: int = 1_700_000_000_000,
                 delivery_limit: int = DEFAULT_DELIVERY_LIMIT) -> None:
        self.environment = environment
        #: the queues' rules (the job's defaults): a message that failed ``delivery_limit``
        #: times is dead-lettered, no longer replayed (:meth:`dead_letters`)
        self.ttl = Ttl(delivery_limit=delivery_limit)
        self.options = options or PeerOptions(ack_linger_ms=0)
        self.partitions = partitions
        self.max_message_bytes = max_message_bytes
        self.auto_run = auto_run
        self.clock_ms = start_ms
        self.records: list[LoggedRecord] = []
        self.directory: dict[str, dict[str, Any]] = {}
        self.replicas_stalled = False
        self._stalled: list[Callable[[BaseException | None], None]] = []
        self._offsets: dict[int, int] = {}
        self._peers: dict[str, TestPeer] = {}
        self._incarnations: dict[str, TestPeer] = {}
        self._jobs: deque[tuple[TestPeer, str, Any]] = deque()
        self._running = False
        self._current: TestPeer | None = None
        self._crash_next: dict[str, tuple[str | None, bool]] = {}
        self._delivered: dict[tuple[str, str], Envelope] = {}
        self._codec = peer_codec()
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- peers ---------------------------------------------------------------------------
    def now_ms(self) -> int:
        """The bus's clock (moved by :meth:`advance`)."""
        return self.clock_ms

    def peer(self, peer_id: str, environment: str | None = None, *, persistent: bool = True,
             options: PeerOptions | None = None, start: bool = True) -> TestPeer:
        """A new peer (started unless ``start=False``)."""
        opts = (options or self.options).with_(persistent=persistent)
        peer = TestPeer(self, peer_id, environment or self.environment, opts)
        old = self._peers.get(peer_id)
        self._peers[peer_id] = peer
        if start:
            try:
                peer.start()
            except Exception:
                if old is not None:
                    self._peers[peer_id] = old
                raise
        return peer

    def __getitem__(self, peer_id: str) -> TestPeer:
        return self._peers[peer_id]

    def start_peer(self, peer: TestPeer) -> None:
        """Run ``peer``'s start sequence on the bus (called by :meth:`TestPeer.start`)."""
        core = peer._core
        core.set_phase(Phase.STARTING)
        for key, desc in list(self.directory.items()):
            core.on_directory(key, desc)
        try:
            core.check_duplicate(self._probe)
        except Exception:
            core.set_phase(Phase.STOPPED)
            raise
        core.publish_descriptor(True)
        core.begin_replay()
        for env in self._replay_envelopes(peer.peer_id):
            core.deliver_replayed(env)
        core.end_replay()
        self.run_if_auto()

    def restart(self, peer_id: str) -> TestPeer:
        """Start ``peer_id`` again as a new incarnation with the same handlers; it replays
        every message it had not acked (``ctx.replay``, ``ctx.delivery_count`` = failures so
        far). A running peer is stopped first."""
        old = self._peers[peer_id]
        if not old.crashed and old._core.phase in RUNNING:
            old.stop()
        new = TestPeer(self, peer_id, old._core.environment, old._core.options,
                       old._core.handlers)
        self._peers[peer_id] = new
        new.start()
        return new

    def crash(self, peer_id: str) -> None:
        """Crash ``peer_id`` now: unappended acks and queued handler jobs are lost, its
        directory entry stays up until its heartbeat expires. Called from inside one of the
        peer's handlers, it aborts the handler midway (raises :class:`SimulatedCrash`)."""
        peer = self._peers[peer_id]
        if self._current is peer:
            raise SimulatedCrash(peer_id)
        self._crash(peer)

    def crash_next(self, peer_id: str, message_type: type | str | None = None,
                   after_handler: bool = False) -> None:
        """Crash ``peer_id`` at its next handler (of ``message_type`` if given): before the
        handler runs, or ``after_handler`` once it returned but before its ack."""
        name = message_type if isinstance(message_type, str) or message_type is None \
            else message_type_of(message_type).name
        self._crash_next[peer_id] = (name, after_handler)

    def _crash(self, peer: TestPeer) -> None:
        peer.crashed = True
        peer._core.drop_pending_acks()
        peer._core.set_phase(Phase.STOPPED)
        self._jobs = deque(j for j in self._jobs if j[0] is not peer)

    def duplicate(self, message_id: str, to: str, bypass_dedup: bool = False) -> None:
        """Deliver ``message_id`` to ``to`` once more, live, as a network duplicate would.
        The peer's dedup drops it unless ``bypass_dedup`` (or the peer restarted since)."""
        env = self._delivered.get((to, message_id)) or next(
            (e for e in self._replay_envelopes(to, all_sends=True) if e.message_id == message_id),
            None)
        if env is None:
            raise KeyError(f"no message {message_id} was sent to {to}")
        peer = self._peers[to]
        if bypass_dedup:
            peer._core.dedup.forget(message_id)
        copy = Envelope(env.message_id, env.sender, env.message_type, env.payload,
                        env.timestamp_ms, env.persistent, env.environment, env.delivery_count)
        peer._core.inbox.accept(copy)
        self.run_if_auto()

    def advance(self, seconds: float) -> None:
        """Move the clock; running peers heartbeat, others' entries may expire."""
        self.clock_ms += int(seconds * 1000)
        for peer in list(self._peers.values()):
            if not peer.crashed and peer._core.phase in RUNNING:
                peer._core.tick()
        self.run_if_auto()

    def stall_replicas(self) -> None:
        """From now on ``quorum``/``all`` sends stay unconfirmed (replicas down)."""
        self.replicas_stalled = True

    def resume_replicas(self) -> None:
        """Replicas are back: every stalled durability wait completes."""
        self.replicas_stalled = False
        stalled, self._stalled = self._stalled, []
        for done in stalled:
            done(None)
        self.run_if_auto()

    def purge(self, peer_id: str) -> None:
        """Append a Purge: ``peer_id``'s queue empties."""
        self.append_record(peer_id, self._codec.encode("Purge", {
            "peer": peer_id, "environment": self._peers[peer_id]._core.environment
            if peer_id in self._peers else self.environment, "timestamp_ms": self.clock_ms}),
            None)

    # ---- running -------------------------------------------------------------------------
    def run_until_idle(self, max_steps: int = 10_000_000) -> int:
        """Handle queued messages until none is left; returns how many jobs ran."""
        if self._running:
            return 0
        self._running = True
        steps = 0
        try:
            while self._jobs and steps < max_steps:
                peer, incarnation, job = self._jobs.popleft()
                if peer.crashed or peer._core.incarnation != incarnation:
                    continue
                steps += 1
                self._run_job(peer, job)
            for peer in self._peers.values():
                if not peer.crashed and peer._core.phase in RUNNING:
                    peer._core.flush_acks()
        finally:
            self._running = False
        return steps

    def _run_job(self, peer: TestPeer, job: Any) -> None:
        plan = self._crash_next.get(peer.peer_id)
        if plan is not None and plan[0] in (None, job.env.message_type):
            del self._crash_next[peer.peer_id]
            if not plan[1]:
                self._crash(peer)
                return
            job._finish = lambda j, e, p=peer: self._crash(p)
        self._current = peer
        try:
            if job.is_async:
                self._run_coroutine(job.run_async())
            else:
                job.run()
        except SimulatedCrash:
            self._crash(peer)
        finally:
            self._current = None

    def _run_coroutine(self, coro: Any) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(coro)
            return
        box: list[BaseException] = []

        def run() -> None:  # a running loop on this thread: use a helper thread's own loop
            try:
                asyncio.run(coro)
            except BaseException as exc:  # noqa: BLE001
                box.append(exc)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        if box:
            raise box[0]

    # ---- what TestPeer's ports call (public for them; tests need not) ---------------------
    def attach(self, peer: TestPeer) -> None:
        """Make ``peer``'s current incarnation reachable at its ``mem://`` endpoint."""
        self._incarnations[peer._core.incarnation] = peer

    def stall(self, done: Callable[[BaseException | None], None]) -> None:
        """Hold a stability wait until :meth:`resume_replicas`."""
        self._stalled.append(done)

    def submit_job(self, peer: TestPeer, job: Any) -> None:
        """Queue a handler job of ``peer``'s current incarnation."""
        self._jobs.append((peer, peer._core.incarnation, job))

    def run_if_auto(self) -> None:
        """Run queued jobs now when the bus runs them automatically."""
        if self.auto_run:
            self.run_until_idle()

    # ---- the in-memory log, directory and network ------------------------------------------
    def append_record(self, key: str, value: bytes, on_delivery: Any) -> None:
        """Append an encoded txlog record under ``key`` (a peer's log port)."""
        if len(value) > self.max_message_bytes:
            from tidemark.log.exceptions import OversizedMessageError
            raise OversizedMessageError(f"record of {len(value)} bytes exceeds"
                                        f" max_message_bytes={self.max_message_bytes}")
        dec = self._codec.decode(value)
        part = partition_for_peer(key, self.partitions)
        offset = self._offsets.get(part, 0)
        self._offsets[part] = offset + 1
        self.records.append(LoggedRecord(part, offset, key, dec.name, dec.record))
        if on_delivery is not None:
            on_delivery(None, _Msg("txlog", part, offset))

    def register_descriptor(self, peer_id: str, descriptor: dict[str, Any]) -> None:
        """Write a directory entry and tell every running peer (a peer's directory port)."""
        self.directory[peer_id] = dict(descriptor)
        for peer in list(self._peers.values()):
            if not peer.crashed and peer._core.phase is not Phase.CREATED:
                peer._core.on_directory(peer_id, dict(descriptor))

    def _at(self, endpoint: str) -> TestPeer | None:
        peer = self._incarnations.get(endpoint[len("mem://"):].partition("/")[2])
        if peer is None or peer.crashed or peer._core.phase not in RUNNING:
            return None
        return peer

    def _probe(self, endpoint: str) -> str | None:
        peer = self._at(endpoint)
        return None if peer is None else peer._core.incarnation

    def deliver_batch(self, endpoint: str, batch: bytes, done: Any) -> None:
        """Deliver a direct batch to the incarnation at ``endpoint`` (a peer's direct port)."""
        peer = self._at(endpoint)
        if peer is None:
            done(None, PeerUnreachableError(f"connection refused by {endpoint}"))
            return
        record = self._codec.decode(batch).record
        receipt = self._codec.decode(peer._core.receive_bytes(batch)).record
        if not receipt["error"]:
            for m in record["messages"]:
                self._delivered[(peer.peer_id, m["message_id"])] = Envelope(
                    m["message_id"], record["sender"], m["message_type"], m["payload"],
                    m["timestamp_ms"], m["persistent"], record["environment"])
        done(receipt, None)

    # ---- what the log says -----------------------------------------------------------------
    def _replay_envelopes(self, peer_id: str, all_sends: bool = False) -> Iterator[Envelope]:
        if all_sends:
            for rec in self.records:
                if rec.key == peer_id and rec.name == "Send":
                    yield Envelope.from_send(rec.record, True, rec.partition, rec.offset)
            return
        partition = partition_for_peer(peer_id, self.partitions)
        for send, entry in self._queues().queue(peer_id):
            assert send.record is not None
            env = Envelope.from_send(send.record, True, partition, send.offset)
            env.delivery_count = entry.delivery_count
            yield env

    def _queues(self) -> QueueFold:
        """The queues as the queues job folds them from :attr:`records` (the same model:
        acks, early acks, purges, delivery counts, dead letters, memory lifetimes)."""
        fold = QueueFold(self.ttl)
        by_peer: dict[str, list[LoggedRecord]] = {}
        for rec in self.records:
            by_peer.setdefault(rec.key, []).append(rec)
        for peer_id, recs in by_peer.items():
            fold.apply(peer_id, [ev for r in recs for ev in events_of(r.name, r.record, r.offset)])
        return fold

    def dead_letters(self, peer_id: str | None = None) -> list[dict[str, Any]]:
        """The messages the queues dead-lettered (of ``peer_id`` if given), as the queues job
        writes them to ``deadletter``: peer, message id, failed deliveries, last reason."""
        fold = self._queues()
        return [{"peer": p, "message_id": let.message_id, "delivery_count": let.delivery_count,
                 "reason": let.reason, "send_offset": let.send_offset}
                for p in fold.peers if peer_id is None or p == peer_id
                for let in fold.letters(p)]

    def unacked(self, peer_id: str) -> list[str]:
        """Message ids queued for ``peer_id`` (sent, not acked, not purged), in log order."""
        return [e.message_id for e in self._replay_envelopes(peer_id)]

    def sends(self, peer_id: str | None = None) -> list[dict[str, Any]]:
        """Send records in txlog (to ``peer_id`` if given)."""
        return self._of("Send", peer_id)

    def acks(self, peer_id: str | None = None) -> list[dict[str, Any]]:
        """The acks in txlog (by ``peer_id`` if given), one ``{message_id, peer, environment,
        timestamp_ms}`` per acked id: a peer appends them as AckBatch records."""
        out: list[dict[str, Any]] = []
        for r in self.records:
            if peer_id is not None and r.key != peer_id:
                continue
            if r.name == "Ack":
                out.append(r.record)
            elif r.name == "AckBatch":
                out.extend({"message_id": mid, "peer": r.record["peer"],
                            "environment": r.record["environment"],
                            "timestamp_ms": r.record["timestamp_ms"]}
                           for mid in r.record["message_ids"])
        return out

    def failures(self, peer_id: str | None = None) -> list[dict[str, Any]]:
        """DeliveryFailed records in txlog (of ``peer_id`` if given)."""
        return self._of("DeliveryFailed", peer_id)

    def _of(self, name: str, peer_id: str | None) -> list[dict[str, Any]]:
        return [r.record for r in self.records
                if r.name == name and (peer_id is None or r.key == peer_id)]
