"""What a :class:`~tidemark.peer_client.Peer` runs over besides its core: the core's ports,
and how the peer serves direct delivery, reads the directory, keeps time and waits.

Two wirings: :class:`KafkaWiring` (Kafka, gRPC, threads, the replica nodes: the real stack)
and :class:`tidemark.peer_client.memory.MemoryWiring` (the in-memory
:class:`~tidemark.peer_client.testing.TestBus`, on the calling thread). The ``Peer`` is the
same class over either.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from tidemark.gossip.pki import Identity
from tidemark.gossip.tls import Transport, resolve_transport
from tidemark.log.registry import env_value
from tidemark.log.settings import Settings
from tidemark.peer_client.core import PeerCore, now_ms
from tidemark.peer_client.direct import DirectClient, DirectServer
from tidemark.peer_client.executor import ThreadExecutor
from tidemark.peer_client.kafka_io import DirectoryFollower, KafkaLog
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.ports import DirectoryPort, DirectPort, Executor, StabilityPort

__all__ = ["Wiring", "Workers", "Log", "KafkaWiring"]

log = logging.getLogger("peer_client")


class Log(Protocol):
    """The txlog port, plus waiting for what was appended."""

    def append(self, key: str, value: bytes, on_delivery: Any = None) -> None:
        """Append one record (see :class:`~tidemark.peer_client.ports.LogPort`)."""

    def append_many(self, key: str, values: list[bytes], on_delivery: Any = None) -> None:
        """Append records in order under one key."""

    def flush(self, timeout: float) -> None:
        """Wait for every appended record."""

    def serve(self) -> None:
        """Run pending completion callbacks now."""


class Workers(Executor, Protocol):
    """The executor, plus what the peer reports and asyncio needs."""

    @property
    def active(self) -> int:
        """Jobs submitted and not finished."""

    def set_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Run ``async def`` handlers on ``loop``."""


class Wiring(Protocol):
    """The ports of one peer incarnation and its life around them."""

    @property
    def log(self) -> Log:
        """Appends to txlog."""

    @property
    def direct(self) -> DirectPort:
        """Delivers to other peers."""

    @property
    def directory(self) -> DirectoryPort:
        """Writes this peer's directory entry."""

    @property
    def stability(self) -> StabilityPort | None:
        """Answers ``quorum`` and ``all``."""

    @property
    def executor(self) -> Workers:
        """Runs the handlers."""

    @property
    def transport(self) -> Transport | None:
        """This peer's side of mutual TLS (None: no network, as on a TestBus)."""

    @property
    def max_message_bytes(self) -> int:
        """The largest record txlog takes."""

    @property
    def clock_ms(self) -> Callable[[], int]:
        """The clock (wall-clock milliseconds, or the test bus's)."""

    @property
    def blocking(self) -> bool:
        """Whether other threads complete the work while a call waits. False: everything
        runs on the calling thread, so calls wait 0 s and :meth:`settle` runs what they
        queued."""

    def bind(self, core: PeerCore) -> None:
        """The core these ports serve (called once, when the peer is made)."""

    def serve(self, status: Callable[[], dict[str, Any]]) -> str:
        """Start taking direct deliveries; the endpoint to register."""

    def read_directory(self, timeout_s: float) -> None:
        """Feed the directory to its end to the core."""

    def follow_directory(self) -> None:
        """From now on feed directory changes to the core as they come."""

    def call(self, endpoint: str, batch: bytes, timeout: float) -> dict[str, Any]:
        """Deliver ``batch`` and wait for the receipt (raises ``PeerUnreachableError``)."""

    def start_housekeeping(self) -> None:
        """Start ticking the core (acks lingering, heartbeats, dead peers)."""

    def settle(self) -> None:
        """Run the work the calls queued (only when not :attr:`blocking`)."""

    def halt(self) -> None:
        """Stop housekeeping (first thing at close)."""

    def close(self) -> None:
        """Close the rest: directory, server, client, replicas, workers."""


class KafkaWiring:
    """The real stack: txlog and directory on Kafka, direct delivery over gRPC, handlers on
    a thread pool, durability ``quorum``/``all`` from the replica nodes, one housekeeping
    thread (Kafka callbacks, ack linger, heartbeats, dead peers)."""

    def __init__(self, peer_id: str, environment: str, settings: Settings,
                 options: PeerOptions, stability: StabilityPort | None = None) -> None:
        self.settings, self.options = settings, options
        # mutual TLS as this peer; no material (and not insecure) = no start (fails closed)
        self.transport: Transport | None = resolve_transport(
            Identity("peer", peer_id, environment), files=options.tls,
            insecure=options.insecure)
        self.kafka = KafkaLog(settings)
        self.log: Log = self.kafka
        self.directory: DirectoryPort = self.kafka
        self.client = DirectClient(options.direct_timeout_ms, self.transport)
        self.direct: DirectPort = self.client
        self.executor: Workers = ThreadExecutor(options.workers, name=peer_id)
        if stability is None:
            from tidemark.peer_client.stability import ReplicaStability
            stability = ReplicaStability(settings, options.durability_timeout_ms,
                                         peer=(peer_id, environment),
                                         transport=self.transport)
        self.stability: StabilityPort | None = stability
        self.max_message_bytes = settings.max_message_bytes
        self.clock_ms: Callable[[], int] = now_ms
        self.blocking = True
        self.follower: DirectoryFollower | None = None
        self._core: PeerCore | None = None
        self._server: DirectServer | None = None
        self._stop = threading.Event()
        self._house: threading.Thread | None = None

    def bind(self, core: PeerCore) -> None:
        """The core these ports serve."""
        self._core = core

    def _bound(self) -> PeerCore:
        assert self._core is not None, "bind() the core first"
        return self._core

    def serve(self, status: Callable[[], dict[str, Any]]) -> str:
        """Serve gRPC on ``options.bind``; ``options.advertise`` or the bound address."""
        core = self._bound()
        bind = self.options.bind
        if bind == PeerOptions.bind:  # left at its default: the host's setting, if any
            bind = env_value("peer_bind") or bind
        self._server = DirectServer(bind, core.receive_bytes, status=status,
                                    environment=core.environment, transport=self.transport)
        return self.options.advertise or self._server.endpoint

    def read_directory(self, timeout_s: float) -> None:
        """Read the directory topic to its end."""
        self.follower = DirectoryFollower(self.settings, self._bound().on_directory)
        self.follower.read_to_end(timeout_s)

    def follow_directory(self) -> None:
        """Follow the directory topic on its own thread."""
        assert self.follower is not None
        self.follower.start()

    def call(self, endpoint: str, batch: bytes, timeout: float) -> dict[str, Any]:
        """A blocking gRPC Deliver."""
        return self.client.call(endpoint, batch, timeout=timeout)

    def start_housekeeping(self) -> None:
        """Start the housekeeping thread."""
        self._house = threading.Thread(target=self._housekeeping, daemon=True,
                                       name=f"{self._bound().peer_id}-house")
        self._house.start()

    def _housekeeping(self) -> None:
        core = self._bound()
        tick_s, next_tick = self.options.tick_ms / 1000, 0.0
        poll, tick, outbox = self.kafka.poll, core.tick, core.outbox
        served = outbox.served
        while not self._stop.is_set():
            if outbox.served != served:
                # a sender appending fast serves the delivery callbacks itself (every 512
                # appends): polling beside it only takes the interpreter lock from it
                # (docs/peer_client.md, "bench send and the housekeeping thread")
                served = outbox.served
                self._stop.wait(tick_s)
            else:
                poll(tick_s)
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + tick_s
                try:
                    tick()
                except Exception:  # noqa: BLE001 - keep ticking
                    log.exception("peer %s housekeeping failed", core.peer_id)

    def settle(self) -> None:
        """Nothing to do: other threads do the work (a blocking wiring is not asked)."""

    def halt(self) -> None:
        """Stop the housekeeping thread."""
        self._stop.set()
        if self._house is not None:
            self._house.join(5)

    def close(self) -> None:
        """Close the follower, the server, the client, the replica waits, the workers."""
        for closer in (getattr(self.follower, "close", None),
                       getattr(self._server, "stop", None), self.client.close,
                       getattr(self.stability, "close", None), self.executor.close):
            if closer is not None:
                try:
                    closer()
                except Exception as exc:  # noqa: BLE001 - close the rest anyway
                    log.debug("closing: %s", exc)
        self.follower, self._server = None, None
