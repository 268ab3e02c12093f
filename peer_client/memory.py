"""In-memory ports: a :class:`~tidemark.peer_client.Peer` over the
:class:`~tidemark.peer_client.testing.TestBus` instead of Kafka, gRPC and threads.

:class:`MemoryWiring` is one peer incarnation's wiring (direct delivery, replicas, executor,
and :class:`MemoryLog` for txlog and directory); :class:`MemoryReplayer` replays the peer's queue as
the bus folds it from its txlog. Both call the bus through :class:`Bus`; the bus makes them
(a wiring does not import the bus).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from tidemark.gossip.tls import Transport
from tidemark.log.queue_state import Ttl
from tidemark.peer_client.core import PeerCore
from tidemark.peer_client.records import Envelope

__all__ = ["Bus", "MemoryWiring", "MemoryLog", "MemoryReplayer", "LoggedMessage"]


class Bus(Protocol):
    """What the in-memory ports ask of their :class:`~tidemark.peer_client.testing.TestBus`."""

    max_message_bytes: int
    replicas_stalled: bool
    ttl: Ttl
    directory: dict[str, dict[str, Any]]

    def now_ms(self) -> int:
        """The bus's clock."""

    def attach(self, wiring: "MemoryWiring") -> None:
        """Make ``wiring``'s incarnation reachable at its ``mem://`` endpoint."""

    def append_record(self, key: str, value: bytes, on_delivery: Any) -> None:
        """Append to the in-memory txlog."""

    def deliver_batch(self, endpoint: str, batch: bytes, done: Any) -> None:
        """Deliver a direct batch to the incarnation at ``endpoint``."""

    def register_descriptor(self, peer_id: str, descriptor: dict[str, Any]) -> None:
        """Publish a directory entry."""

    def stall(self, done: Callable[[BaseException | None], None]) -> None:
        """Hold a durability wait until the replicas resume."""

    def submit_job(self, wiring: "MemoryWiring", job: Any) -> None:
        """Queue a handler job."""

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> Any:
        """Run ``fn`` once the bus's clock is ``delay_s`` further (a nak's wait)."""

    def run_until_idle(self, max_steps: int = 10_000_000) -> int:
        """Run queued jobs until none is left."""

    def run_if_auto(self) -> None:
        """Run queued jobs unless the bus is manual."""

    def replay_envelopes(self, peer_id: str) -> Iterable[Envelope]:
        """``peer_id``'s queue as the queues job folds it, in txlog order."""


class LoggedMessage:
    """Where the in-memory txlog put a record (what a Kafka delivery callback is given)."""

    __slots__ = ("_topic", "_partition", "_offset")

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset

    def topic(self) -> str:
        """The topic."""
        return self._topic

    def partition(self) -> int:
        """The partition."""
        return self._partition

    def offset(self) -> int:
        """The offset."""
        return self._offset


class MemoryLog:
    """The bus's txlog and directory as a log port and a directory port: every append
    completes at once."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    def append(self, key: str, value: bytes, on_delivery: Any = None) -> None:
        """Append to the bus's txlog; ``on_delivery`` fires at once."""
        self.bus.append_record(key, value, on_delivery)

    def append_many(self, key: str, values: list[bytes], on_delivery: Any = None) -> None:
        """Append each of ``values`` in order."""
        for value in values:
            self.bus.append_record(key, value, on_delivery)

    def flush(self, timeout: float) -> None:
        """Nothing is pending."""

    def serve(self) -> None:
        """Nothing is pending."""

    def publish(self, peer_id: str, descriptor: dict[str, Any], on_delivery: Any = None) -> None:
        """Write the bus's directory entry (every following peer sees it)."""
        self.bus.register_descriptor(peer_id, descriptor)


class MemoryWiring:
    """The ports of one peer incarnation on a bus, on the calling thread: appends and
    direct deliveries complete at once, handler jobs wait in the bus's queue until it runs
    them (after each call of the peer when the bus runs automatically)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.log = self.directory = MemoryLog(bus)
        self.direct, self.executor = self, self
        self.stability: MemoryWiring | None = self
        self.transport: Transport | None = None  # no network
        self.max_message_bytes = bus.max_message_bytes
        self.clock_ms: Callable[[], int] = bus.now_ms
        self.blocking = False   #: one thread: a call never waits, the bus runs its work
        self.crashed = False    #: crashed by the bus: its jobs and acks are gone
        self.following = False  #: takes directory changes (between start and close)
        self._core: PeerCore | None = None

    @property
    def core(self) -> PeerCore:
        """The core these ports serve."""
        assert self._core is not None, "bind() the core first"
        return self._core

    # ---- the peer's life -----------------------------------------------------------------
    def bind(self, core: PeerCore) -> None:
        """The core these ports serve (its naks wait on the bus's clock)."""
        self._core = core
        core.inbox.schedule = self.bus.schedule
        core.inbox.delivery_limit = self.bus.ttl.delivery_limit

    def serve(self, status: Callable[[], dict[str, Any]]) -> str:
        """Reachable at ``mem://<peer>/<incarnation>`` from now on."""
        self.bus.attach(self)
        return f"mem://{self.core.peer_id}/{self.core.incarnation}"

    def read_directory(self, timeout_s: float) -> None:
        """Give the core every directory entry of the bus."""
        for key, desc in list(self.bus.directory.items()):
            self.core.on_directory(key, dict(desc))

    def follow_directory(self) -> None:
        """Take the bus's directory changes from now on."""
        self.following = True

    def call(self, endpoint: str, batch: bytes, timeout: float) -> dict[str, Any]:
        """Deliver at once; the receipt (raises ``PeerUnreachableError``)."""
        box: list[tuple[dict[str, Any] | None, BaseException | None]] = []
        self.bus.deliver_batch(endpoint, batch, lambda r, e: box.append((r, e)))
        receipt, error = box[0]
        if error is not None:
            raise error
        assert receipt is not None
        return receipt

    def start_housekeeping(self) -> None:
        """Nothing: :meth:`TestBus.advance` ticks the running peers."""

    def settle(self) -> None:
        """Run the handler jobs a call queued (unless the bus is manual)."""
        self.bus.run_if_auto()

    def halt(self) -> None:
        """Nothing runs in the background."""

    def close(self) -> None:
        """Stop taking directory changes."""
        self.following = False

    # ---- DirectPort ------------------------------------------------------------------------
    def deliver(self, endpoint: str, batch: bytes, done: Any) -> None:
        """Deliver at once to the incarnation at ``endpoint``."""
        self.bus.deliver_batch(endpoint, batch, done)

    # ---- StabilityPort ---------------------------------------------------------------------
    def wait(self, level: str, partition: int, offset: int,
             done: Callable[[BaseException | None], None]) -> None:
        """Holds at once, unless the bus's replicas are stalled."""
        if self.bus.replicas_stalled:
            self.bus.stall(done)
        else:
            done(None)

    # ---- Executor --------------------------------------------------------------------------
    def submit(self, key: str, job: Any) -> None:
        """Queue ``job`` on the bus (which runs every peer's jobs in order)."""
        self.bus.submit_job(self, job)

    def drain(self, timeout: float) -> bool:
        """Run the bus until idle."""
        self.bus.run_until_idle()
        return True

    @property
    def active(self) -> int:
        """None: a job runs to its end before the bus returns."""
        return 0

    def set_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """The bus runs ``async def`` handlers on a loop of its own."""


class MemoryReplayer:
    """Replays the peer's queue from the bus's txlog (``ctx.replay``, ``delivery_count``)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.stage = "replay"
        self.replayed = 0

    def run(self, core: PeerCore) -> bool:
        """Deliver every queued message, in txlog order; no handover."""
        for env in self.bus.replay_envelopes(core.peer_id):
            core.deliver_replayed(env)
            self.replayed += 1
        self.stage = "normal"
        return False

    def status(self) -> dict[str, Any]:
        """``stage``, ``replayed`` and ``forwarded`` (always 0), as ``ReplicaReplayer``'s."""
        return {"stage": self.stage, "replayed": self.replayed, "forwarded": 0}
