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

Each peer is a real :class:`tidemark.peer_client.Peer` over in-memory ports
(:class:`tidemark.peer_client.memory.MemoryWiring`): the same start, stop, send, receive,
dedup, ack and failure code as on Kafka. Everything runs on the calling thread: a message is
queued when sent and handled by :meth:`TestBus.run_until_idle`, which the bus calls after
every call of a peer unless ``auto_run=False``. The bus keeps the txlog it was given
(:attr:`TestBus.records`) and derives each peer's unacked queue from it, as the real queues do.

``TestBus(with_real=True, settings=...)`` runs the same test against the real stack: its
peers are ``Peer`` s over Kafka, gRPC and the replica nodes (replaying through
:class:`~tidemark.peer_client.ReplicaReplayer`), :meth:`TestBus.wait_until` polls instead of
running the queue, and what only the in-memory bus can do (crashes, the fake clock, reading
its txlog) raises :class:`RealStackError`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tidemark.log.partitioner import partition_for_peer
from tidemark.log.queue_fold import QueueFold, events_of
from tidemark.log.queue_state import DEFAULT_DELIVERY_LIMIT, Ttl
from tidemark.log.settings import Settings
from tidemark.peer_client.context import RUNNING, Phase
from tidemark.peer_client.exceptions import PeerClientError, PeerUnreachableError
from tidemark.peer_client.memory import LoggedMessage, MemoryReplayer, MemoryWiring
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.records import Envelope, peer_codec

__all__ = ["TestBus", "SimulatedCrash", "LoggedRecord", "RealStackError"]


class SimulatedCrash(BaseException):
    """Raised inside a handler to crash its peer (not an Exception: handlers cannot catch it
    by accident with ``except Exception``)."""


class RealStackError(PeerClientError):
    """A :class:`TestBus` facility that only the in-memory bus has, used ``with_real``."""


@dataclass(frozen=True)
class LoggedRecord:
    """One record of the in-memory txlog."""

    partition: int
    offset: int
    key: str
    name: str
    record: dict[str, Any]


@dataclass
class BusTimer:
    """A call :meth:`TestBus.schedule` runs once the bus's clock reaches ``due_ms``."""

    due_ms: int
    fn: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        """Do not run it."""
        self.cancelled = True


class TestBus:
    """Peers, a directory and a txlog, all in memory and single-threaded; or, ``with_real``,
    peers on the real stack that ``settings`` names."""

    __test__ = False

    def __init__(self, environment: str = "test", *, options: PeerOptions | None = None,
                 partitions: int = 12, max_message_bytes: int = 1_000_000,
                 auto_run: bool = True, start_ms: int = 1_700_000_000_000,
                 delivery_limit: int = DEFAULT_DELIVERY_LIMIT, with_real: bool = False,
                 settings: Settings | None = None) -> None:
        if with_real and settings is None:
            raise ValueError("TestBus(with_real=True) needs the real stack's settings")
        self.environment = environment
        self.with_real = with_real
        #: the real stack's settings (``with_real``)
        self.settings = settings
        #: the queues' rules (the job's defaults): a message that failed ``delivery_limit``
        #: times is dead-lettered, no longer replayed (:meth:`dead_letters`)
        self.ttl = Ttl(delivery_limit=delivery_limit)
        self.options = options or (PeerOptions() if with_real else PeerOptions(ack_linger_ms=0))
        self.partitions = partitions
        self.max_message_bytes = max_message_bytes
        self.auto_run = auto_run
        self.clock_ms = start_ms
        self.records: list[LoggedRecord] = []
        self.directory: dict[str, dict[str, Any]] = {}
        self.replicas_stalled = False
        self._stalled: list[Callable[[BaseException | None], None]] = []
        self._offsets: dict[int, int] = {}
        self._peers: dict[str, Peer] = {}
        self._wirings: dict[str, MemoryWiring] = {}
        self._incarnations: dict[str, MemoryWiring] = {}
        self._jobs: deque[tuple[MemoryWiring, Any]] = deque()
        self._timers: list[BusTimer] = []  # naks waiting, on the bus's clock
        self._running = False
        self._current: MemoryWiring | None = None
        self._crash_next: dict[str, tuple[str | None, bool]] = {}
        self._delivered: dict[tuple[str, str], Envelope] = {}
        self._codec = peer_codec()
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> "TestBus":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every peer still running."""
        for peer in list(self._peers.values()):
            peer.stop()

    def _in_memory(self, what: str) -> None:
        if self.with_real:
            raise RealStackError(f"TestBus.{what} needs the in-memory bus, not with_real")

    # ---- peers ---------------------------------------------------------------------------
    def now_ms(self) -> int:
        """The bus's clock (moved by :meth:`advance`)."""
        return self.clock_ms

    def peer(self, peer_id: str, environment: str | None = None, *, persistent: bool = True,
             options: PeerOptions | None = None, start: bool = True) -> Peer:
        """A new :class:`~tidemark.peer_client.Peer` on this bus (started unless
        ``start=False``; start it with ``peer.start()``)."""
        env = environment or self.environment
        opts = (options or self.options).with_(persistent=persistent)
        if self.with_real:
            from tidemark.peer_client.replay import ReplicaReplayer
            assert self.settings is not None
            peer = Peer(peer_id, env, self.settings, opts,
                        replayer=ReplicaReplayer(self.settings))
        else:
            # one thread: never block on the inbox, never wait at stop for what cannot come
            opts = opts.with_(inbox_limit=1 << 30, stop_timeout_s=0.0)
            wiring = MemoryWiring(self)
            peer = Peer(peer_id, env, Settings(environment=env, source="TestBus",
                                               max_message_bytes=self.max_message_bytes),
                        opts, replayer=MemoryReplayer(self), wiring=wiring)
        old, old_wiring = self._peers.get(peer_id), self._wirings.get(peer_id)
        self._peers[peer_id] = peer
        if not self.with_real:
            self._wirings[peer_id] = wiring
        if start:
            try:
                peer.start()
            except Exception:
                if old is not None:
                    self._peers[peer_id] = old
                if old_wiring is not None:
                    self._wirings[peer_id] = old_wiring
                raise
        return peer

    def __getitem__(self, peer_id: str) -> Peer:
        return self._peers[peer_id]

    def restart(self, peer_id: str) -> Peer:
        """Start ``peer_id`` again as a new incarnation with the same handlers; it replays
        every message it had not acked (``ctx.replay``, ``ctx.delivery_count`` = failures so
        far). A running peer is stopped first."""
        old = self._peers[peer_id]
        old.stop()
        new = self.peer(peer_id, old.environment, persistent=old.options.persistent,
                        options=old.options, start=False)
        handlers = old._core.handlers
        for name in handlers.names():
            h = handlers.get(name)
            assert h is not None
            (new.batch_handler if h.batch else new.handler)(h.message_type.cls)(h.fn)
        new.start()
        return new

    def wait_until(self, condition: Callable[[], bool], timeout: float = 60.0,
                   what: str = "the condition") -> None:
        """Wait until ``condition()`` holds: in memory, run the queue until idle and check
        once; ``with_real``, poll it until ``timeout`` (seconds). Raises
        :class:`TimeoutError` naming ``what`` if it does not hold."""
        if not self.with_real:
            self.run_until_idle()
            if not condition():
                raise TimeoutError(f"{what}: not so once the test bus is idle")
            return
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not so within {timeout}s")
            time.sleep(0.05)

    def crash(self, peer_id: str) -> None:
        """Crash ``peer_id`` now: unappended acks and queued handler jobs are lost, its
        directory entry stays up until its heartbeat expires. Called from inside one of the
        peer's handlers, it aborts the handler midway (raises :class:`SimulatedCrash`)."""
        self._in_memory("crash")
        wiring = self._wirings[peer_id]
        if self._current is wiring:
            raise SimulatedCrash(peer_id)
        self._crash(wiring)

    def crash_next(self, peer_id: str, message_type: type | str | None = None,
                   after_handler: bool = False) -> None:
        """Crash ``peer_id`` at its next handler (of ``message_type`` if given): before the
        handler runs, or ``after_handler`` once it returned but before its ack."""
        self._in_memory("crash_next")
        name = message_type if isinstance(message_type, str) or message_type is None \
            else message_type_of(message_type).name
        self._crash_next[peer_id] = (name, after_handler)

    def _crash(self, wiring: MemoryWiring) -> None:
        wiring.crashed = True
        wiring.core.drop_pending_acks()
        wiring.core.set_phase(Phase.STOPPED)
        self._jobs = deque(j for j in self._jobs if j[0] is not wiring)

    def duplicate(self, message_id: str, to: str, bypass_dedup: bool = False) -> None:
        """Deliver ``message_id`` to ``to`` once more, live, as a network duplicate would.
        The peer's dedup drops it unless ``bypass_dedup`` (or the peer restarted since)."""
        self._in_memory("duplicate")
        env = self._delivered.get((to, message_id)) or next(
            (e for e in self.replay_envelopes(to, all_sends=True) if e.message_id == message_id),
            None)
        if env is None:
            raise KeyError(f"no message {message_id} was sent to {to}")
        core = self._wirings[to].core
        if bypass_dedup:
            core.dedup.forget(message_id)
        copy = Envelope(env.message_id, env.sender, env.message_type, env.payload,
                        env.timestamp_ms, env.persistent, env.environment, env.delivery_count)
        core.inbox.accept(copy)
        self.run_if_auto()

    def advance(self, seconds: float) -> None:
        """Move the clock; running peers heartbeat, others' entries may expire."""
        self._in_memory("advance")
        self.clock_ms += int(seconds * 1000)
        for wiring in list(self._wirings.values()):
            if not wiring.crashed and wiring.core.phase in RUNNING:
                wiring.core.tick()
        self.run_if_auto()

    def stall_replicas(self) -> None:
        """From now on ``quorum``/``all`` sends stay unconfirmed (replicas down)."""
        self._in_memory("stall_replicas")
        self.replicas_stalled = True

    def resume_replicas(self) -> None:
        """Replicas are back: every stalled durability wait completes."""
        self._in_memory("resume_replicas")
        self.replicas_stalled = False
        stalled, self._stalled = self._stalled, []
        for done in stalled:
            done(None)
        self.run_if_auto()

    def purge(self, peer_id: str) -> None:
        """The operator's Purge: ``peer_id``'s queue empties of everything sent so far (as
        ``tidemark peer purge`` appends it to ``purges``, reaching txlog's end now)."""
        self._in_memory("purge")
        part = partition_for_peer(peer_id, self.partitions)
        below = self._offsets.get(part, 0)
        self.records.append(LoggedRecord(part, below, peer_id, "Purge", {
            "peer": peer_id, "environment": self._peers[peer_id].environment
            if peer_id in self._peers else self.environment, "timestamp_ms": self.clock_ms,
            "txlog_partition": part, "below_offset": below}))

    # ---- running -------------------------------------------------------------------------
    def schedule(self, delay_s: float, fn: Callable[[], None]) -> "BusTimer":
        """Run ``fn`` once the bus's clock is ``delay_s`` further (:meth:`advance`), with the
        queued jobs; a nak's wait. Cancelled by its ``cancel``."""
        timer = BusTimer(self.clock_ms + round(delay_s * 1000), fn)
        self._timers.append(timer)
        return timer

    def _fire_due(self) -> bool:
        """Run the scheduled calls whose time has come, in time order; whether any was."""
        due = sorted((t for t in self._timers if t.due_ms <= self.clock_ms),
                     key=lambda t: t.due_ms)
        if not due:
            return False
        self._timers = [t for t in self._timers if t.due_ms > self.clock_ms]
        for timer in due:
            if not timer.cancelled:
                timer.fn()
        return True

    def run_until_idle(self, max_steps: int = 10_000_000) -> int:
        """Handle queued messages (and naks whose wait is over on the bus's clock) until
        none is left; returns how many jobs ran."""
        if self._running:
            return 0
        self._running = True
        steps = 0
        try:
            while steps < max_steps and (self._jobs or self._fire_due()):
                if not self._jobs:
                    continue
                wiring, job = self._jobs.popleft()
                if wiring.crashed:
                    continue
                steps += 1
                self._run_job(wiring, job)
            for wiring in self._wirings.values():
                if not wiring.crashed and wiring.core.phase in RUNNING:
                    wiring.core.flush_acks()
        finally:
            self._running = False
        return steps

    def _run_job(self, wiring: MemoryWiring, job: Any) -> None:
        peer_id = wiring.core.peer_id
        plan = self._crash_next.get(peer_id)
        if plan is not None and plan[0] in (None, job.env.message_type):
            del self._crash_next[peer_id]
            if not plan[1]:
                self._crash(wiring)
                return
            job._finish = lambda j, e, w=wiring: self._crash(w)
        self._current = wiring
        try:
            if job.is_async:
                self._run_coroutine(job.run_async())
            else:
                job.run()
        except SimulatedCrash:
            self._crash(wiring)
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

    # ---- what the in-memory ports call (public for them; tests need not) ------------------
    def attach(self, wiring: MemoryWiring) -> None:
        """Make ``wiring``'s incarnation reachable at its ``mem://`` endpoint."""
        self._incarnations[wiring.core.incarnation] = wiring

    def stall(self, done: Callable[[BaseException | None], None]) -> None:
        """Hold a stability wait until :meth:`resume_replicas`."""
        self._stalled.append(done)

    def submit_job(self, wiring: MemoryWiring, job: Any) -> None:
        """Queue a handler job of ``wiring``'s incarnation."""
        self._jobs.append((wiring, job))

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
            on_delivery(None, LoggedMessage("txlog", part, offset))

    def register_descriptor(self, peer_id: str, descriptor: dict[str, Any]) -> None:
        """Write a directory entry and tell every running peer (a peer's directory port)."""
        self.directory[peer_id] = dict(descriptor)
        for wiring in list(self._wirings.values()):
            if wiring.following and not wiring.crashed:
                wiring.core.on_directory(peer_id, dict(descriptor))

    def _at(self, endpoint: str) -> MemoryWiring | None:
        wiring = self._incarnations.get(endpoint[len("mem://"):].partition("/")[2])
        if wiring is None or wiring.crashed or wiring.core.phase not in RUNNING:
            return None
        return wiring

    def deliver_batch(self, endpoint: str, batch: bytes, done: Any) -> None:
        """Deliver a direct batch to the incarnation at ``endpoint`` (a peer's direct port)."""
        wiring = self._at(endpoint)
        if wiring is None:
            done(None, PeerUnreachableError(f"connection refused by {endpoint}"))
            return
        record = self._codec.decode(batch).record
        receipt = self._codec.decode(wiring.core.receive_bytes(batch)).record
        if not receipt["error"]:
            for m in record["messages"]:
                self._delivered[(wiring.core.peer_id, m["message_id"])] = Envelope(
                    m["message_id"], record["sender"], m["message_type"], m["payload"],
                    m["timestamp_ms"], m["persistent"], record["environment"])
        done(receipt, None)

    # ---- what the log says -----------------------------------------------------------------
    def replay_envelopes(self, peer_id: str, all_sends: bool = False) -> Iterator[Envelope]:
        """``peer_id``'s queue as the queues job folds it, in txlog order, each with its
        delivery count (what a starting peer replays); ``all_sends``: every Send to it."""
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
        self._in_memory("dead_letters and unacked")
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
        return [e.message_id for e in self.replay_envelopes(peer_id)]

    def sends(self, peer_id: str | None = None) -> list[dict[str, Any]]:
        """Send records in txlog (to ``peer_id`` if given)."""
        return self._of("Send", peer_id)

    def acks(self, peer_id: str | None = None) -> list[dict[str, Any]]:
        """The acks in txlog (by ``peer_id`` if given), one ``{message_id, peer, environment,
        timestamp_ms}`` per acked id: a peer appends them as AckBatch records."""
        self._in_memory("acks")
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
        self._in_memory(f"{name} records")
        return [r.record for r in self.records
                if r.name == name and (peer_id is None or r.key == peer_id)]
