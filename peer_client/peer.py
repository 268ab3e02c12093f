"""``Peer``: the synchronous peer over Kafka, gRPC and the replica nodes.

    with Peer("billing", "prod", settings) as peer:
        @peer.handler
        def on_order(msg: OrderPlaced, ctx: MessageContext) -> None: ...
        peer.send("shipping", OrderShipped(...))

Start: serve direct delivery, read the directory to its end, refuse if this peer id is
already running, register (up, new incarnation), follow the directory and heartbeat. Stop:
refuse new messages, let in-flight sends confirm and handlers finish, flush acks, register
down. Threads: handlers (a bounded pool; ``async def`` handlers on an event loop), gRPC
server and client callbacks, one housekeeping thread (Kafka callbacks, ack linger,
heartbeats, dead peers), the directory follower, one waiter per partition for quorum/all.
All of that is the peer's :class:`~tidemark.peer_client.wiring.Wiring`; the test double runs
this same class over in-memory ports (``wiring=``, see :mod:`tidemark.peer_client.testing`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from tidemark.gossip.record_signing import sealer_of
from tidemark.log.settings import Settings, load_settings
from tidemark.peer_client.context import RUNNING, Phase
from tidemark.peer_client.core import PeerCore
from tidemark.peer_client.delivery import Delivery
from tidemark.peer_client.directory import PeerEntry
from tidemark.peer_client.exceptions import (
    PeerStateError,
    PeerUnreachableError,
    WrongEnvironmentError,
)
from tidemark.peer_client.metrics import MetricsServer, PeerCollector
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.ports import StabilityPort
from tidemark.peer_client.wiring import KafkaWiring, Wiring

__all__ = ["Peer", "Replayer"]

log = logging.getLogger("peer_client")


class Replayer(Protocol):
    """Replay at start (the next issue): deliver the peer's missed messages through
    ``core.deliver_replayed`` while live messages are held back."""

    def run(self, core: PeerCore) -> bool:
        """Replay; return True to end in HANDOVER (keep forwarding), False for NORMAL."""


def check_environment(peer_id: str, environment: str | None, settings: Settings) -> str:
    """The peer's environment; refuses one that contradicts the configured environment."""
    configured = settings.environment
    if environment is None:
        return configured
    if configured not in ("default", environment):
        raise WrongEnvironmentError(
            f"peer {peer_id} is in environment {environment!r}, but this cluster's settings"
            f" say {configured!r} ({settings.source}): refusing to register")
    return environment


class Peer:
    """A peer of the bus; a context manager (``with Peer(...) as peer``).

    ``wiring`` (default: :class:`~tidemark.peer_client.wiring.KafkaWiring` over ``settings``
    and ``stability``) is what the peer runs over; the test double gives in-memory ports."""

    def __init__(self, peer_id: str, environment: str | None = None,
                 settings: Settings | None = None, options: PeerOptions | None = None, *,
                 stability: StabilityPort | None = None, replayer: Replayer | None = None,
                 wiring: Wiring | None = None) -> None:
        self.settings = settings or load_settings()
        self.options = options or PeerOptions()
        env = check_environment(peer_id, environment, self.settings)
        if wiring is None:
            wiring = KafkaWiring(peer_id, env, self.settings, self.options, stability)
        self._wiring = wiring
        self._blocking = wiring.blocking
        self.stability = wiring.stability
        self.replayer = replayer
        self._core = PeerCore(peer_id, env, self.options, log_port=wiring.log,
                             direct=wiring.direct, directory_port=wiring.directory,
                             stability=wiring.stability, executor=wiring.executor,
                             max_message_bytes=wiring.max_message_bytes,
                             clock_ms=wiring.clock_ms,
                             seal=sealer_of(wiring.transport))  # acks signed with its TLS key
        wiring.bind(self._core)
        self._metrics: MetricsServer | None = None
        if self._blocking:  # nothing to settle after a call: the sender's post, no frame between
            self.post = self._core.post  # type: ignore[method-assign]
            self.post_many = self._core.post_many  # type: ignore[method-assign]

    # ---- identity --------------------------------------------------------------------------
    @property
    def peer_id(self) -> str:
        """This peer's id."""
        return self._core.peer_id

    @property
    def environment(self) -> str:
        """This peer's environment."""
        return self._core.environment

    @property
    def incarnation(self) -> str:
        """This run's random incarnation id."""
        return self._core.incarnation

    @property
    def endpoint(self) -> str:
        """Where this peer takes direct deliveries (``host:port``)."""
        return self._core.endpoint

    @property
    def phase(self) -> Phase:
        """Where the peer is in its life."""
        return self._core.phase

    @property
    def metrics_endpoint(self) -> str | None:
        """Where ``/metrics`` is served (``PeerOptions.metrics_bind``), None when off."""
        return self._metrics.endpoint if self._metrics is not None else None

    @property
    def stats(self) -> dict[str, int]:
        """Counters: sent, logged, direct_delivered, received, handled, duplicates, acks,
        failed_deliveries, malformed, unknown_type, no_handler, rejected..."""
        return self._core.stats_snapshot()

    def status(self) -> dict[str, Any]:
        """Phase, incarnation, counters, and the replay/handover figures (``replay``)."""
        out: dict[str, Any] = {"peer_id": self.peer_id, "environment": self.environment,
                               "incarnation": self.incarnation, "phase": self.phase.value,
                               "endpoint": self.endpoint, "stats": self.stats}
        out["held"] = self._core.inbox.held_status()
        out["latency"] = self._core.latencies.snapshot()
        replay = getattr(self.replayer, "status", None)
        if replay is not None:
            out["replay"] = doc = replay()
            if self.phase is Phase.REPLAY and doc.get("stage") == "handover":
                out["phase"] = "handover"
            out["replayed"], out["forwarded"] = doc.get("replayed", 0), doc.get("forwarded", 0)
        return out

    def handler(self, fn_or_cls: Any = None, *, backoff: Sequence[float] = ()) -> Any:
        """Register a handler: ``@peer.handler`` typed by the first parameter's annotation,
        or ``@peer.handler(MessageType)``. It takes the message, and optionally a
        :class:`~tidemark.peer_client.MessageContext`. Registering subscribes to the type.
        Returning acks the message; raising fails it (delivered again at the next replay);
        ``ctx.nak(delay)`` delivers it again in this peer after ``delay`` seconds (without
        one: ``backoff[n]`` seconds after its n-th failure, e.g. ``backoff=[0.2, 1, 5]``);
        ``ctx.term(reason)`` dead-letters it at once."""
        return self._core.handler(fn_or_cls, backoff=backoff)

    def batch_handler(self, fn_or_cls: Any = None, *, backoff: Sequence[float] = ()) -> Any:
        """Register a batch handler: ``@peer.batch_handler`` with the first parameter
        annotated ``list[MessageType]``, or ``@peer.batch_handler(MessageType)``. It takes a
        list of messages (consecutive ones of a replay come together, in order; a live one
        alone), and optionally a :class:`~tidemark.peer_client.BatchContext`. Raising
        :class:`~tidemark.peer_client.BatchFailed` fails only the messages it names; any other
        exception fails the whole batch. ``Nak``/``Term`` as the failure of a message (in
        ``BatchFailed``, or raised for the whole batch) work as in :meth:`handler`."""
        return self._core.batch_handler(fn_or_cls, backoff=backoff)

    def directory(self) -> list[PeerEntry]:
        """The peers of this environment, as this peer's directory cache knows them."""
        with self._core.dir_lock:
            return self._core.directory.entries()

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> "Peer":
        """Serve, read the directory, register, replay (once available), go live."""
        core, opts, wiring = self._core, self.options, self._wiring
        if core.phase is not Phase.CREATED:
            raise PeerStateError(f"peer {self.peer_id} is {core.phase.value}: create a new"
                                 f" Peer to start again")
        try:
            core.set_phase(Phase.STARTING)  # opens the persisted dedup store, if configured
            endpoint = wiring.serve(self.status)
            if opts.metrics_bind is not None:
                self._metrics = MetricsServer(PeerCollector(self.status), opts.metrics_bind)
            core.endpoint = endpoint
            wiring.read_directory(opts.start_timeout_s)
            core.check_duplicate(self._probe)
            wiring.start_housekeeping()
            if self.replayer is not None:
                core.begin_replay()  # before registering: hold back the first live messages
            core.publish_descriptor(True)
            wiring.log.flush(opts.start_timeout_s)
            wiring.follow_directory()
            if self.replayer is not None:
                bind = getattr(self.replayer, "bind_transport", None)
                if bind is not None and self._wiring.transport is not None:
                    bind(self._wiring.transport)  # replay as this peer, not as an operator
                core.end_replay(handover=self.replayer.run(core))
            else:
                core.set_phase(Phase.NORMAL)
        except BaseException as exc:
            self._abort_start(exc)
            raise
        self._settle()
        log.info("peer %s up in %s at %s (incarnation %s)", self.peer_id, self.environment,
                 self.endpoint, self.incarnation)
        return self

    def stop(self) -> None:
        """Refuse new messages, confirm in-flight sends, finish handlers, flush acks,
        register down. Safe to call twice."""
        core, t = self._core, self.options.stop_timeout_s
        if core.phase not in RUNNING:
            self._close()
            return
        self._shut_down(t, abandon=False)
        log.info("peer %s stopped", self.peer_id)

    def _abort_start(self, exc: BaseException) -> None:
        """A failed start: the same ordered shut-down as :meth:`stop`, but the handler jobs
        not started yet are abandoned (the next incarnation gets them). When this returns no
        handler runs any more, and the dedup store is closed only after the last one."""
        log.error("peer %s: start failed (%s: %s); stopping", self.peer_id,
                  type(exc).__name__, exc)
        if self._core.phase in (Phase.CREATED, Phase.STARTING):
            self._core.set_phase(Phase.STOPPED)
            self._close()
            return
        self._shut_down(self.options.stop_timeout_s, abandon=True)

    def _shut_down(self, t: float, abandon: bool) -> None:
        """Stop intake (direct, replay and follower alike), stop the replayer's follower,
        let the handlers finish (``abandon``: only those already running), flush acks,
        register down, and only then close the dedup store and the rest."""
        core = self._core
        # nothing new is handled from here on (direct, replay or txlog follower alike), and
        # whatever was admitted before is submitted before the drain below
        if not core.inbox.stop_admitting(Phase.STOPPING, t):
            log.warning("peer %s: messages still being admitted at stop", self.peer_id)
        core.inbox.cancel_naks()  # not acked: the next incarnation gets them
        if abandon:
            core.inbox.abandon()
        try:
            halt = getattr(self.replayer, "halt", None)
            if halt is not None:
                halt()
            if not abandon and not core.flight.wait_empty(t):
                log.warning("peer %s: %d send(s) still unconfirmed at stop", self.peer_id,
                            core.flight.in_flight)
            executor = self._wiring.executor
            if not executor.drain(t):
                log.warning("peer %s: %d handler(s) still running at stop", self.peer_id,
                            executor.active)
                core.inbox.abandon()  # what has not started yet never will
            core.flush_acks()
            core.publish_descriptor(False)
            self._wiring.log.flush(t)
        except Exception as exc:  # noqa: BLE001 - the store must still close, in order
            log.warning("peer %s: stopping: %s", self.peer_id, exc)
        finally:
            core.set_phase(Phase.STOPPED)
            self._close()

    def _close(self) -> None:
        self._wiring.halt()
        for closer in (getattr(self.replayer, "close", None), self._wiring.close,
                       getattr(self._metrics, "close", None)):
            if closer is not None:
                try:
                    closer()
                except Exception as exc:  # noqa: BLE001 - close the rest anyway
                    log.debug("closing: %s", exc)
        self._metrics = None

    def _probe(self, endpoint: str) -> str | None:
        batch = self._core.encode_record("DirectBatch", {
            "sender": self.peer_id, "sender_incarnation": self.incarnation,
            "recipient": self.peer_id, "environment": self.environment, "messages": [],
            "sender_nonce": self._core.nonce})
        try:
            receipt = self._wiring.call(endpoint, batch, 2.0)
        except PeerUnreachableError:
            return None
        return receipt["incarnation"] if receipt.get("recipient") == self.peer_id else None

    def __enter__(self) -> "Peer":
        if self._core.phase is Phase.CREATED:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- sending ---------------------------------------------------------------------------
    def send_nowait(self, to: str, message: Any, durability: str = "log",
                    timeout: float | None = None) -> Delivery:
        """Queue a point-to-point send; the :class:`Delivery` completes once it holds at
        ``durability``. Blocks only while the flight size is reached (``timeout``)."""
        handle = self._core.send(to, message, durability, self._timeout(timeout))
        self._settle()
        return handle

    def send(self, to: str, message: Any, durability: str = "log",
             timeout: float | None = None) -> str:
        """Send and return the message id once ``durability`` holds: ``log`` (Kafka
        acknowledged the Send), ``quorum`` (a majority of the partition's replicas applied
        it) or ``all`` (the stable cut covers it). A persistent message to a peer that is
        down or unreachable is logged and replayed to it later: no error."""
        return self.send_nowait(to, message, durability, timeout).result(self._timeout(timeout))

    def post(self, to: str, message: Any, durability: str = "log",
             timeout: float | None = None) -> str:
        """Fire and forget: queue a send and return its message id at once, with no handle
        (the fastest way to send many messages). :meth:`flush` waits for every one and
        raises :class:`~tidemark.log.exceptions.DeliveryError` if Kafka refused any."""
        # a blocking wiring's peer has the sender's post itself in place of this (__init__)
        mid = self._core.post(to, message, durability, 0.0)
        self._wiring.settle()
        return mid

    def post_many(self, to: str, messages: Iterable[Any], durability: str = "log",
                  timeout: float | None = None) -> list[str]:
        """:meth:`post` every message of ``messages`` to ``to``, in order, and return their
        ids: the recipient is decided and the flight window taken once per chunk of a
        thousand, which makes a list cheaper to send than one call per message."""
        ids = self._core.post_many(to, messages, durability, 0.0)
        self._wiring.settle()
        return ids

    def publish_nowait(self, message: Any, durability: str = "log",
                       timeout: float | None = None) -> Delivery:
        """Queue a publish to every subscriber of the message's type."""
        handle = self._core.publish(message, durability, self._timeout(timeout))
        self._settle()
        return handle

    def publish(self, message: Any, durability: str = "log",
                timeout: float | None = None) -> str:
        """Publish and return the message id once ``durability`` holds for every subscriber."""
        return self.publish_nowait(message, durability, timeout).result(self._timeout(timeout))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every send so far is confirmed; False at the deadline. Raises
        :class:`~tidemark.log.exceptions.DeliveryError` if Kafka refused a posted send."""
        done = self._core.flight.wait_empty(self._timeout(timeout))
        self._core.check_posted()
        return done

    def _timeout(self, timeout: float | None) -> float | None:
        """How long a call may wait: 0 when nothing completes while this thread waits."""
        return timeout if self._blocking else 0.0

    def _settle(self) -> None:
        """Let the work a call started happen, when no other thread does it."""
        if not self._blocking:
            self._wiring.settle()

    def subscribers(self, message_cls: type) -> list[str]:
        """Peers whose directory entry subscribes to ``message_cls``."""
        return self._core.subscribers(message_cls)

    def wait_for_peer(self, peer_id: str, timeout: float = 30.0,
                      condition: Callable[[PeerEntry], bool] | None = None) -> PeerEntry:
        """Block until the directory shows ``peer_id`` alive (and ``condition``)."""
        deadline = time.monotonic() + timeout
        core = self._core
        with core.dir_changed:
            while True:
                entry = core.directory.get(peer_id)
                if entry is not None and core.directory.is_alive(peer_id, core.clock_ms()) \
                        and (condition is None or condition(entry)):
                    return entry
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PeerUnreachableError(f"peer {peer_id} did not come up within"
                                               f" {timeout}s")
                core.dir_changed.wait(left)
