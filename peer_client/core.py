"""The peer core: phases, handlers, the directory and receiving; no threads, no sockets.
Sending is its :class:`~tidemark.peer_client.sending.Sender`, acks its
:class:`~tidemark.peer_client.acks.Acker`. ``Peer``, ``AsyncPeer`` and the test double are
this core plus ports (``ports.py``); replay plugs in through ``begin_replay``,
``deliver_replayed(_batch)`` and ``end_replay``."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from time import perf_counter
from typing import Any

from tidemark.gossip.pki import Identity
from tidemark.log.wire import MARKER, AckBatchEncoder, Sealer, SendEncoder
from tidemark.peer_client.acks import AckBatcher, Acker, RangeAcks
from tidemark.peer_client.columns import Columns
from tidemark.peer_client.context import RUNNING, Phase
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.dedup_store import DedupStore, resolve_dedup_dir, resolve_ttl_ms
from tidemark.peer_client.direct_order import DirectOrder
from tidemark.peer_client.directory import DirectoryCache, PeerEntry, needs_probe
from tidemark.peer_client.exceptions import DuplicatePeerError, UnknownPeerError
from tidemark.peer_client.flight import FlightControl
from tidemark.peer_client.handlers import Handler, HandlerRegistry
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.incarnation import new_incarnation, sender_refusal
from tidemark.peer_client.jobs import Job
from tidemark.peer_client.latency import Latencies
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.outbox import Outbox
from tidemark.peer_client.ports import DirectoryPort, DirectPort, Executor, LogPort, StabilityPort
from tidemark.peer_client.records import Envelope, peer_codec
from tidemark.peer_client.sending import Sender

__all__ = ["PeerCore", "now_ms"]

log = logging.getLogger("peer_client")


def now_ms() -> int:
    """Wall-clock milliseconds (``Peer.post`` reads the same expression inline)."""
    return time.time_ns() // 1_000_000


class PeerCore:
    """One peer's state and decisions; I/O goes through the ports given to it.

    ``send``, ``post`` and ``publish`` are its :attr:`sender`'s (bound once: the send path
    takes no extra call); acks and failure records go through its :attr:`acker`."""

    def __init__(self, peer_id: str, environment: str, options: PeerOptions, *,
                 log_port: LogPort, direct: DirectPort, directory_port: DirectoryPort,
                 stability: StabilityPort | None, executor: Executor, max_message_bytes: int,
                 clock_ms: Callable[[], int] = now_ms, handlers: HandlerRegistry | None = None,
                 incarnation: str | None = None, seal: Sealer | None = None) -> None:
        if not isinstance(peer_id, str) or not peer_id or "\0" in peer_id:
            raise ValueError(f"peer id must be a non-empty string, got {peer_id!r}")
        if not isinstance(environment, str) or not environment:
            raise ValueError(f"environment must be a non-empty string, got {environment!r}")
        self.peer_id, self.environment, self.options = peer_id, environment, options
        if incarnation is None:  # bound to this peer: see peer_client.incarnation
            incarnation, self.nonce = new_incarnation(environment, peer_id)
        else:
            self.nonce = ""
        self.incarnation = incarnation
        self.clock_ms = clock_ms
        self.directory_port, self.executor = directory_port, executor
        self.endpoint = ""
        self.stats: Counter[str] = Counter()
        self.direct_order = DirectOrder()  # late direct batches are refused
        self.directory = DirectoryCache(environment, options.dead_after_ms)
        self.dir_lock = threading.Lock()
        self.dir_changed = threading.Condition(self.dir_lock)
        self.handlers = handlers.copy() if handlers is not None else HandlerRegistry()
        self.dedup = DedupWindow(options.dedup_window)
        self.flight = FlightControl(options.flight_size, options.flight_mode)
        self._codec = peer_codec()
        self.encode_record = self._codec.encode
        self.acker = Acker(peer_id, environment,
                           AckBatcher(options.ack_batch, options.ack_linger_ms),
                           log_port=log_port,
                           encode_acks=AckBatchEncoder(self._codec, peer_id, environment,
                                                       seal).encode,
                           encode_record=self.encode_record, clock_ms=clock_ms,
                           stats=self.stats, seal=seal,
                           ranges=RangeAcks(options.replay_ack_batch, options.ack_linger_ms)
                           if options.range_acks else None)
        #: sampled latency histograms (sends, handlers, replay batches): metrics
        self.latencies = Latencies()
        self.inbox = Inbox(peer_id, environment, self.handlers, self.dedup, executor.submit,
                           self.acker.record_failure, self.acker.ack, self.stats,
                           options.inbox_limit if options.inbox_limit else None,
                           getattr(executor, "submit_many", None), self.acker.ack_many,
                           options.hold_limit, options.hold_bytes,
                           on_success_columns=self.acker.ack_columns)
        self.inbox.latencies = self.latencies
        self.outbox = Outbox(peer_id, self.incarnation, self.nonce, environment, log_port,
                             direct, stability,
                             options.direct_batch, options.unreachable_backoff_ms,
                             max_message_bytes, self.stats, self._endpoint_of,
                             options.direct_batch_bytes)
        self.sender = Sender(peer_id, environment, self.incarnation, max_message_bytes,
                             inbox=self.inbox, directory=self.directory, dir_lock=self.dir_lock,
                             outbox=self.outbox, flight=self.flight,
                             send_encoder=SendEncoder(MARKER + self._codec.fingerprint_of("Send"),
                                                      peer_id, environment,
                                                      self._codec.schema("Send")),
                             dead_after_ms=options.dead_after_ms, clock_ms=clock_ms,
                             stats=self.stats, latencies=self.latencies,
                             wall_clock=clock_ms is now_ms)
        self.send = self.sender.send
        self.post = self.sender.post
        self.post_many = self.sender.post_many
        self.publish = self.sender.publish
        self.check_posted = self.sender.check_posted
        self._last_heartbeat = 0
        self._registered_ms = 0
        self._warned: set[str] = set()
        self.dedup_store: DedupStore | None = None  # opened at STARTING, closed at STOPPED

    # ---- phases --------------------------------------------------------------------------
    @property
    def phase(self) -> Phase:
        """Where the peer is in its life."""
        return self.inbox.phase

    def set_phase(self, phase: Phase) -> None:
        """Move to ``phase``; leaving STARTING/REPLAY dispatches the held-back messages
        first (live ones arriving meanwhile queue behind them: per-sender order holds).
        STARTING opens the persisted dedup store if configured (it may raise
        :class:`~tidemark.peer_client.exceptions.DedupStoreError`); STOPPED closes it."""
        if phase is Phase.STARTING:
            self.open_dedup_store()
        if phase in (Phase.HANDOVER, Phase.NORMAL):
            self.inbox.release(phase)
        else:
            self.inbox.phase = phase
        if phase is Phase.STOPPED:
            self.close_dedup_store()

    def open_dedup_store(self) -> DedupStore | None:
        """Open this peer's persisted dedup store (``options.dedup_dir``, else the
        ``TIDEMARK_PEER_DEDUP_DIR`` setting; neither: off) and plug it into the inbox."""
        root = resolve_dedup_dir(self.options.dedup_dir)
        if not root or self.dedup_store is not None:
            return self.dedup_store
        store = DedupStore.for_peer(root, self.peer_id, self.environment,
                                    resolve_ttl_ms(self.options.dedup_ttl_ms),
                                    self.options.dedup_max_entries)
        gone = store.sweep(self.clock_ms())
        log.info("peer %s: persisted dedup store %s (%d ids, %d expired)", self.peer_id,
                 store.path, len(store), gone)
        self.dedup_store = store
        self.inbox.clock_ms = self.clock_ms
        self.inbox.completed = store
        return store

    def close_dedup_store(self) -> None:
        """Unplug and close the persisted dedup store (nothing is recorded afterwards)."""
        store, self.dedup_store = self.dedup_store, None
        if store is not None:
            self.inbox.completed = None
            store.close()

    def begin_replay(self) -> None:
        """Replay starts: live messages are held back from now on."""
        self.set_phase(Phase.REPLAY)

    def deliver_replayed(self, env: Envelope) -> None:
        """A message from replay (deduplicated against live ones by message id)."""
        env.replay = True
        self.inbox.accept(env)

    def deliver_replayed_batch(self, envs: list[Envelope]) -> int:
        """Messages from replay, in order: as :meth:`deliver_replayed` each, decided under
        one lock and run per sender without a thread handoff per message. Returns how many
        were not dropped as duplicates."""
        for env in envs:
            env.replay = True
        t0 = perf_counter()
        fresh = self.inbox.accept_many(envs)
        if envs:  # admitted: through the inbox limit, at the pace of the handlers
            self.latencies.by_name["replay_batch"].observe((perf_counter() - t0) / len(envs))
        return fresh

    def deliver_replayed_columns(self, cols: Columns) -> int:
        """:meth:`deliver_replayed_batch` of a replayed chunk kept as columns: the inbox's
        lean path when it applies, else the general one (an Envelope each)."""
        t0 = perf_counter()
        fresh = self.inbox.accept_columns(cols)
        if fresh is None:
            return self.deliver_replayed_batch(cols.envelopes())
        self.stats["replayed_lean"] += len(cols)
        if len(cols):
            self.latencies.by_name["replay_batch"].observe((perf_counter() - t0) / len(cols))
        return fresh

    def end_replay(self, handover: bool = False) -> None:
        """Replay finished: dispatch held-back live messages (to HANDOVER or NORMAL)."""
        self.set_phase(Phase.HANDOVER if handover else Phase.NORMAL)

    # ---- handlers ------------------------------------------------------------------------
    def handler(self, fn_or_cls: Any = None, *, batch: bool = False,
                backoff: Sequence[float] = ()) -> Any:
        """Decorator: ``@peer.handler`` (typed by annotation) or ``@peer.handler(Type)``;
        ``batch``: a batch handler (see :meth:`batch_handler`); ``backoff``: the delays of
        naks without one (:attr:`~tidemark.peer_client.handlers.Handler.backoff`)."""
        if isinstance(fn_or_cls, type):
            cls = fn_or_cls

            def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
                self._add_handler(fn, cls, batch, backoff)
                return fn
            return wrap
        if fn_or_cls is None:
            return partial(self.handler, batch=batch, backoff=backoff)
        self._add_handler(fn_or_cls, None, batch, backoff)
        return fn_or_cls

    def batch_handler(self, fn_or_cls: Any = None, *, backoff: Sequence[float] = ()) -> Any:
        """Decorator: ``@peer.batch_handler`` (first parameter annotated ``list[T]``) or
        ``@peer.batch_handler(T)``; the handler takes a list of messages (and optionally a
        :class:`~tidemark.peer_client.context.BatchContext`)."""
        return self.handler(fn_or_cls, batch=True, backoff=backoff)

    def _add_handler(self, fn: Callable[..., Any], cls: type | None,
                     batch: bool = False, backoff: Sequence[float] = ()) -> Handler:
        before = self.handlers.names()
        handler = self.handlers.add(fn, cls, batch, backoff)
        if self.phase in RUNNING and self.handlers.names() != before:
            self.publish_descriptor(True)  # new subscription
        return handler

    # ---- directory -----------------------------------------------------------------------
    def descriptor(self, up: bool) -> dict[str, Any]:
        """This peer's PeerDescriptor record."""
        return PeerEntry(self.peer_id, self.environment, self.endpoint, up,
                         self.options.persistent, frozenset(self.handlers.names()),
                         self.incarnation, self.clock_ms()).to_record()

    def check_duplicate(self, probe: Callable[[str], str | None]) -> None:
        """Refuse to start while another live process runs this peer id.

        ``probe(endpoint)`` returns the incarnation answering there, or None. A registration
        whose heartbeat is fresh but whose endpoint does not answer with its incarnation is a
        crashed process: it is taken over."""
        with self.dir_lock:
            entry = self.directory.get(self.peer_id)
        if not needs_probe(entry, self.incarnation, self.clock_ms(), self.options.dead_after_ms):
            return
        assert entry is not None
        if probe(entry.endpoint) == entry.incarnation:
            age = (self.clock_ms() - entry.timestamp_ms) / 1000
            raise DuplicatePeerError(
                f"peer {self.peer_id} is already running in environment {self.environment!r}"
                f" (incarnation {entry.incarnation} at {entry.endpoint}, heartbeat {age:.1f}s"
                f" ago): stop it first, or use another peer id")
        log.info("peer %s: previous incarnation %s at %s does not answer; taking over",
                 self.peer_id, entry.incarnation, entry.endpoint)

    def publish_descriptor(self, up: bool, on_delivery: Any = None) -> None:
        """Append the descriptor (registration, heartbeat, or down at stop)."""
        self._last_heartbeat = self.clock_ms()
        if up and not self._registered_ms:
            self._registered_ms = self._last_heartbeat
        desc = self.descriptor(up)
        with self.dir_lock:
            self.directory.apply(self.peer_id, desc)
        self.directory_port.publish(self.peer_id, desc, on_delivery)

    def on_directory(self, key: str, record: dict[str, Any] | None) -> None:
        """Fold one record of the directory topic into the cache."""
        with self.dir_lock:
            outcome = self.directory.apply(key, record)
            self.dir_changed.notify_all()
        if outcome.kind == "rejected":
            self.stats["directory_rejected"] += 1
            if key not in self._warned:
                self._warned.add(key)
                log.warning("directory: %s (ignored; peer %s is in %r)", outcome.reason,
                            self.peer_id, self.environment)
        elif (outcome.kind == "applied" and key == self.peer_id and outcome.entry is not None
              and outcome.entry.up and outcome.entry.incarnation != self.incarnation
              and self._registered_ms and outcome.entry.timestamp_ms >= self._registered_ms):
            self.stats["superseded"] += 1
            log.error("peer id %s was registered by another process (incarnation %s at %s)",
                      key, outcome.entry.incarnation, outcome.entry.endpoint)

    def _endpoint_of(self, peer_id: str) -> str | None:
        entry = self.directory.get(peer_id)
        return entry.endpoint if entry is not None and entry.endpoint else None

    def subscribers(self, message_cls: type) -> list[str]:
        """Peers the directory says subscribe to ``message_cls``."""
        with self.dir_lock:
            return [e.peer_id for e in self.directory.subscribers(message_type_of(
                message_cls).name)]

    def peer(self, peer_id: str) -> PeerEntry:
        """The directory entry of ``peer_id``."""
        entry = self.directory.get(peer_id)
        if entry is None:
            raise UnknownPeerError(f"peer {peer_id} is not registered in environment"
                                   f" {self.environment!r}")
        return entry

    # ---- receiving -----------------------------------------------------------------------
    def receive(self, batch: dict[str, Any], caller: Identity | None = None
                ) -> dict[str, Any]:
        """Take a DirectBatch from ``caller`` (its certificate's identity; None on an
        insecure transport); returns the DirectReceipt. A refused batch is not lost: its
        sender appends the messages to the log."""
        out = {"recipient": self.peer_id, "incarnation": self.incarnation,
               "environment": self.environment, "accepted": 0, "error": "", "error_kind": ""}
        sender, env = batch.get("sender", "?"), batch.get("environment")
        why = None if caller is None else sender_refusal(batch, caller.name,
                                                          caller.environment)
        if why is not None:
            self.stats["forbidden"] += 1
            log.warning("refused %d message(s) from %s: %s", len(batch.get("messages", ())),
                        caller, why)
            out.update(error=f"refused: {why}", error_kind="forbidden")
            return out
        if env != self.environment:
            self.stats["rejected"] += 1
            log.warning("refused %d message(s) from %s: environment %r, this peer is in %r",
                        len(batch.get("messages", ())), sender, env, self.environment)
            out.update(error=f"peer {self.peer_id} is in environment {self.environment!r};"
                             f" sender {sender} is in {env!r}", error_kind="environment")
            return out
        if batch.get("recipient") != self.peer_id:
            out.update(error=f"this is peer {self.peer_id}, not {batch.get('recipient')}",
                       error_kind="recipient")
            return out
        messages = batch.get("messages") or ()
        if self.phase not in RUNNING:
            if messages:
                out.update(error=f"peer {self.peer_id} is {self.phase.value}",
                           error_kind="stopping")
            return out
        if not messages:
            out["accepted"] = 0
            return out  # a ping
        inc = str(batch.get("sender_incarnation") or "")
        order = self.direct_order
        with order.lock(sender, inc):
            if order.stale(sender, inc, messages[0]["message_id"]):
                self.stats["stale_direct"] += len(messages)
                out.update(error=f"a later batch of {sender} was accepted already: this one"
                                 f" came late (its sender gave up on it); send through the"
                                 f" log", error_kind="stale")
                return out
            if not self.inbox.hold_room(
                    len(messages), sum(len(m["payload"]) for m in messages),
                    [m["message_id"] for m in messages if m["persistent"]], sender):
                held = self.inbox.held
                out.update(error=f"peer {self.peer_id} is replaying and holds {len(held)}"
                                 f" live message(s) ({held.bytes} bytes) back, its limit:"
                                 f" send through the log", error_kind="held_full")
                return out
            floor = batch.get("log_floor", -1)
            if floor is not None and floor >= 0:
                self.inbox.wait_for_log(sender, floor)  # its earlier messages took the log
            accept = self.inbox.accept
            for m in messages:
                self.stats["received"] += 1
                accept(Envelope(m["message_id"], sender, m["message_type"], m["payload"],
                                m["timestamp_ms"], m["persistent"], env))
            order.accepted(sender, inc, messages[-1]["message_id"])
        out["accepted"] = len(messages)
        return out

    def receive_bytes(self, data: bytes, caller: Identity | None = None) -> bytes:
        """:meth:`receive` on an encoded DirectBatch; the encoded receipt."""
        try:
            decoded = self._codec.decode(data)
            if decoded.name != "DirectBatch":
                raise ValueError(f"expected DirectBatch, got {decoded.name}")
            receipt = self.receive(decoded.record, caller)
        except Exception as exc:  # noqa: BLE001 - a bad request is answered, never fatal
            self.stats["bad_requests"] += 1
            receipt = {"recipient": self.peer_id, "incarnation": self.incarnation,
                       "environment": self.environment, "accepted": 0,
                       "error": f"bad request: {exc}"[:300], "error_kind": "bad_request"}
        return self.encode_record("DirectReceipt", receipt)

    def stats_snapshot(self) -> dict[str, int]:
        """Every counter of this peer."""
        out = dict(self.stats)
        out["sent"] = self.sender.sent
        out["logged"] = self.outbox.logged + self.sender.posted_fast
        store = self.dedup_store
        if store is not None:
            out["dedup_store_ids"] = len(store)
            out["dedup_store_expired"] = store.expired_total
        return out

    # ---- housekeeping --------------------------------------------------------------------
    def tick(self) -> None:
        """Periodic work: lingering acks, dead peers, heartbeat."""
        now = self.clock_ms()
        self.acker.append_due(now)
        store = self.dedup_store
        if store is not None:
            try:
                store.maybe_sweep(now)
            except Exception as exc:  # noqa: BLE001 - closed meanwhile, or a disk error
                log.warning("peer %s: dedup store sweep failed: %s", self.peer_id, exc)
        with self.dir_lock:
            gone = self.directory.expire(now)
        for peer_id in gone:
            log.info("peer %s is down (no heartbeat for %d ms, or stopped)", peer_id,
                     self.options.dead_after_ms)
        if self.phase in RUNNING and now - self._last_heartbeat >= self.options.heartbeat_ms:
            self.publish_descriptor(True)

    # ---- acks ----------------------------------------------------------------------------
    def flush_acks(self) -> int:
        """Append every pending ack now; returns how many."""
        return self.acker.flush()

    def drop_pending_acks(self) -> int:
        """Forget unappended acks (a crash in the test double)."""
        return self.acker.drop_pending()

    def submit_job(self, key: str, job: Job) -> None:
        """Hand a job to the executor (used by tests that drive the core directly)."""
        self.executor.submit(key, job)
