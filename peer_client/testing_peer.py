"""The peers of :class:`tidemark.peer_client.testing.TestBus`: the real core over in-memory
ports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from tidemark.peer_client.context import RUNNING, Phase
from tidemark.peer_client.core import PeerCore
from tidemark.peer_client.delivery import Delivery
from tidemark.peer_client.exceptions import DurabilityTimeoutError, PeerStateError
from tidemark.peer_client.handlers import HandlerRegistry
from tidemark.peer_client.options import PeerOptions


class Bus(Protocol):
    """What a :class:`TestPeer` asks of its :class:`~tidemark.peer_client.testing.TestBus`
    (the bus makes its peers; a peer does not import the bus)."""

    max_message_bytes: int
    replicas_stalled: bool

    def now_ms(self) -> int:
        """The bus's clock."""

    def attach(self, peer: "TestPeer") -> None:
        """Know ``peer`` by its incarnation."""

    def start_peer(self, peer: "TestPeer") -> None:
        """Register ``peer`` and replay its queue."""

    def append_record(self, key: str, value: bytes, on_delivery: Any) -> None:
        """Append to the in-memory txlog."""

    def deliver_batch(self, endpoint: str, batch: bytes, done: Any) -> None:
        """Deliver a direct batch to the peer at ``endpoint``."""

    def register_descriptor(self, peer_id: str, descriptor: dict[str, Any]) -> None:
        """Publish a directory entry."""

    def stall(self, done: Callable[[BaseException | None], None]) -> None:
        """Hold a durability wait until the replicas resume."""

    def submit_job(self, peer: "TestPeer", job: Any) -> None:
        """Queue a handler job."""

    def run_until_idle(self, max_steps: int = 10_000_000) -> int:
        """Run queued jobs until none is left."""

    def run_if_auto(self) -> None:
        """Run queued jobs unless the bus is manual."""

__all__ = ["TestPeer"]


class _Msg:
    __slots__ = ("_topic", "_partition", "_offset")

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


class _Ports:
    """The in-memory ports of one peer incarnation."""

    def __init__(self, bus: Bus, peer: "TestPeer") -> None:
        self.bus, self.peer = bus, peer

    # LogPort
    def append(self, key: str, value: bytes, on_delivery: Any = None) -> None:
        self.bus.append_record(key, value, on_delivery)

    def flush(self, timeout: float) -> None:
        pass

    def serve(self) -> None:
        pass

    # DirectPort
    def deliver(self, endpoint: str, batch: bytes, done: Any) -> None:
        self.bus.deliver_batch(endpoint, batch, done)

    # DirectoryPort
    def publish(self, peer_id: str, descriptor: dict[str, Any], on_delivery: Any = None) -> None:
        self.bus.register_descriptor(peer_id, descriptor)

    # StabilityPort
    def wait(self, level: str, partition: int, offset: int, done: Any) -> None:
        if self.bus.replicas_stalled:
            self.bus.stall(done)
        else:
            done(None)

    # Executor
    def submit(self, key: str, job: Any) -> None:
        self.bus.submit_job(self.peer, job)

    def drain(self, timeout: float) -> bool:
        self.bus.run_until_idle()
        return True

    def close(self) -> None:
        pass


class TestPeer:
    """A peer on a :class:`TestBus`, with the API of :class:`tidemark.peer_client.Peer`."""

    __test__ = False  # not a pytest test class

    def __init__(self, bus: Bus, peer_id: str, environment: str, options: PeerOptions,
                 handlers: HandlerRegistry | None = None) -> None:
        self.bus = bus
        ports = _Ports(bus, self)
        options = options.with_(inbox_limit=1 << 30)  # one thread: never block on the inbox
        self._core = PeerCore(peer_id, environment, options, log_port=ports, direct=ports,
                             directory_port=ports, stability=ports, executor=ports,
                             max_message_bytes=bus.max_message_bytes, clock_ms=bus.now_ms,
                             handlers=handlers)
        self._core.endpoint = f"mem://{peer_id}/{self._core.incarnation}"
        bus.attach(self)
        self.crashed = False

    @property
    def peer_id(self) -> str:
        """This peer's id."""
        return self._core.peer_id

    @property
    def incarnation(self) -> str:
        """This run's incarnation."""
        return self._core.incarnation

    @property
    def phase(self) -> Phase:
        """Where the peer is in its life."""
        return self._core.phase

    @property
    def stats(self) -> dict[str, int]:
        """Counters: sent, received, handled, duplicates, failed_deliveries, acks..."""
        return self._core.stats_snapshot()

    def handler(self, fn_or_cls: Any = None) -> Any:
        """Register a handler (see :meth:`tidemark.peer_client.Peer.handler`)."""
        return self._core.handler(fn_or_cls)

    def batch_handler(self, fn_or_cls: Any = None) -> Any:
        """Register a batch handler (see :meth:`tidemark.peer_client.Peer.batch_handler`)."""
        return self._core.batch_handler(fn_or_cls)

    def start(self) -> "TestPeer":
        """Register, replay what is unacked for this peer, then take live messages."""
        self.bus.start_peer(self)
        return self

    def stop(self) -> None:
        """Drain handlers, flush acks, register as down."""
        if self._core.phase not in RUNNING:
            return
        self._core.set_phase(Phase.STOPPING)
        self.bus.run_until_idle()
        self._core.flush_acks()
        self._core.publish_descriptor(False)
        self._core.set_phase(Phase.STOPPED)

    def send_nowait(self, to: str, message: Any, durability: str = "log") -> Delivery:
        """Queue a send; the :class:`Delivery` completes at the durability level."""
        self._check()
        handle = self._core.send(to, message, durability, timeout=0.0)
        self.bus.run_if_auto()
        return handle

    def send(self, to: str, message: Any, durability: str = "log") -> str:
        """Send and return the message id once ``durability`` holds."""
        return self._result(self.send_nowait(to, message, durability))

    def post(self, to: str, message: Any, durability: str = "log") -> str:
        """Fire and forget (see :meth:`tidemark.peer_client.Peer.post`)."""
        self._check()
        mid = self._core.post(to, message, durability, timeout=0.0)
        self.bus.run_if_auto()
        return mid

    def publish_nowait(self, message: Any, durability: str = "log") -> Delivery:
        """Queue a publish to every subscriber."""
        self._check()
        handle = self._core.publish(message, durability, timeout=0.0)
        self.bus.run_if_auto()
        return handle

    def publish(self, message: Any, durability: str = "log") -> str:
        """Publish and return the message id once ``durability`` holds for every subscriber."""
        return self._result(self.publish_nowait(message, durability))

    def _check(self) -> None:
        if self.crashed:
            raise PeerStateError(f"peer {self.peer_id} crashed: restart it with bus.restart()")

    @staticmethod
    def _result(handle: Delivery) -> str:
        if not handle.done():
            raise DurabilityTimeoutError(f"send of {handle.message_id} cannot complete: the"
                                         f" test bus's replicas are stalled")
        return handle.result(0)

    def __enter__(self) -> "TestPeer":
        if self._core.phase is Phase.CREATED:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
