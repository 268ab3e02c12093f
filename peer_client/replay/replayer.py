"""The peer side of replay on restart: the queue from a replica, then the handover.

:class:`ReplicaReplayer` is the ``replayer`` a :class:`~tidemark.peer_client.peer.Peer` runs right
after it registered its new incarnation (live messages are held back meanwhile):

1. **Replay.** :meth:`ReplicaClient.replay_any` on any live replica of the peer's txlog
   partition; each QueueEntry (txlog order, up to the replica's barrier) is dispatched with
   ``ctx.replay`` set, deduplicated by message id, and acked on the stream once accepted
   (so the inbox limit paces the stream). If the serving replica dies mid-stream, the replay
   goes on on another one (``exclude`` the dead node, ``after_offset`` the last offset
   received); entries seen twice are dropped by dedup.
2. **Handover.** A :class:`~tidemark.peer_client.replay.follower.TxlogFollower` reads the
   peer's own txlog partition from the barrier of the replay that completed. During the
   handover it dispatches every Send to this peer in txlog order (a held-back live message
   is dropped when its logged copy goes by, so per-sender order holds across the switch and
   nothing is handled twice), up to the high watermark read after the replay; it goes on
   reading while the persistent messages held back (or refused) when it first reached the
   end have not been seen in the log yet (for at most ``handover_wait_s``: a sender's
   append may land seconds after its direct copy); live messages arriving after that
   point do not extend the wait, or a steady load would hold the peer there.
   The handover ends on that proof however long it takes (its progress is in
   ``status()``); an optional ``handover_timeout_s`` ends it early without
   failing: the held messages are released and the follower goes on delivering what was not
   delivered directly.
3. **Normal.** The follower stays: for as long as the peer runs it dispatches every Send
   to this peer that is not marked as delivered directly to this incarnation
   (``Send.direct_incarnation``). That is the proof that ends the handover without a
   timer: whatever a stale sender appended without reaching this incarnation directly is
   delivered from the log, whenever it was appended. See ``docs/peer_client.md``,
   "Replay and handover".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tidemark.gossip.cluster_config import ConfigLog, Epoch
from tidemark.gossip.exceptions import NodeUnreachableError, PeerAuthError, ReplayInterruptedError
from tidemark.gossip.record_signing import SignatureVerifier, verifier_of
from tidemark.gossip.replay import DEFAULT_BATCH, DEFAULT_WINDOW, STALL_TIMEOUT_S, read_rows
from tidemark.gossip.service import ReplicaClient
from tidemark.gossip.tls import Transport
from tidemark.gossip.txlog_admission import TxlogAdmission
from tidemark.log.consumer import LogConsumer, read_to_end
from tidemark.log.exceptions import CodecError
from tidemark.log.offsets import end_offsets
from tidemark.log.registry import env_value
from tidemark.log.settings import Settings
from tidemark.log.wire import MARKER, RecordReader
from tidemark.peer_client.columns import Columns
from tidemark.peer_client.core import PeerCore
from tidemark.peer_client.exceptions import ReplayDeniedError
from tidemark.peer_client.records import peer_codec
from tidemark.peer_client.replay.entries import EntryReader
from tidemark.peer_client.replay.follower import TxlogFollower
from tidemark.peer_client.replay.tail import Tail

__all__ = ["ReplicaReplayer", "ReplayFailedError", "read_tail", "read_purges"]

log = logging.getLogger("peer_client.replay")


class ReplayFailedError(RuntimeError):
    """No replica could complete the replay of this peer's queue."""


def read_tail(settings: Settings, peer_id: str, partition: int, start: int, end: int,
              lookback_ms: int = 30_000, admission: TxlogAdmission | None = None) -> Tail:
    """:class:`~tidemark.peer_client.replay.tail.Tail`: ``peer_id``'s records in txlog/``partition``
    ``[start, end)``, the stretch the queues had not read when a replay started on what they
    covered, plus the acks of the ``lookback_ms`` before ``start`` (an Ack may precede its
    Send). Only the peer's own records are decoded (they carry its key); with ``admission``
    (the peer's environment and, in secure mode, its CAs) only those the queues job would
    apply are folded: a forged Ack in the tail does not hide a message from the replay.
    The peer's Purges come from ``purges`` (:func:`read_purges`), whatever the stretch."""
    tail = Tail(start, end)
    read_purges(settings, peer_id, partition, tail, admission)
    if end <= start:
        return tail
    codec, key = peer_codec(), peer_id.encode("utf-8")
    # most of the peer's records are Sends to it, which the tail does not fold: they are
    # told by their header and skipped undecoded; the others go through the generated readers
    send_header = MARKER + codec.fingerprint_of("Send")
    header = len(send_header)
    reader = RecordReader(codec, ("Ack", "DeliveryFailed"))  # a Purge in txlog is refused
    consumer = LogConsumer(settings, codec)
    try:
        first = _lookback_offset(consumer, settings, partition, start, lookback_ms)
        consumer.assign({("txlog", partition): first})
        position = first
        while position < end:
            # records_ready: a partial batch (the stretch's last) is not waited out
            for msg in consumer.records_ready(5000, 0.5):
                off = msg.offset()
                if off is None:
                    continue
                position = off + 1
                if off >= end or msg.key() != key:
                    continue
                value = msg.value() or b""
                if value[:header] == send_header:
                    continue
                try:
                    dec = reader.decode(value)
                except CodecError:
                    continue
                if dec.record.get("peer") != peer_id:
                    continue
                if admission is not None and admission.check(dec.name, dec.record,
                                                             value) is not None:
                    continue  # refused by the job and the replicas too (dead-lettered)
                tail.fold(dec.name, dec.record, off, acks_only=off < start)
    finally:
        consumer.close()
    return tail


def read_purges(settings: Settings, peer_id: str, partition: int, tail: Tail,
                admission: TxlogAdmission | None = None) -> None:
    """Fold ``peer_id``'s Purges of txlog/``partition`` into ``tail``: its records in
    ``purges/<partition>`` (compacted: the latest Purge of each peer, a few records a peer),
    those the queues job would apply. The queues may lag a Purge (the job, or the replica's
    copy of its tombstones): what it reaches is left out of the replay all the same."""
    codec, key = peer_codec(), peer_id.encode("utf-8")
    for msgs in read_to_end(settings, "purges", [partition]):
        for msg in msgs:
            value = msg.value()
            if msg.key() != key or not value:
                continue
            try:
                dec = codec.decode(value)
            except CodecError:
                continue
            rec = dec.record
            if dec.name != "Purge" or rec.get("peer") != peer_id or \
                    rec.get("txlog_partition") != partition:
                continue
            if admission is not None and admission.check(dec.name, rec, value) is not None:
                continue  # refused by the job too (dead-lettered)
            tail.fold("Purge", rec, int(rec["below_offset"]))


def _lookback_offset(consumer: LogConsumer, settings: Settings, partition: int, start: int,
                     lookback_ms: int) -> int:
    """The first offset of txlog/``partition`` logged at most ``lookback_ms`` before the
    record at ``start`` (``start`` itself if that cannot be told)."""
    if lookback_ms <= 0 or start <= 0:
        return start
    from confluent_kafka import TopicPartition
    topic = settings.topic("txlog")
    raw = consumer.raw
    try:
        consumer.assign({("txlog", partition): start})
        msgs = consumer.consume_batch(1, 5.0)
        if not msgs:
            return start
        ts = msgs[0].timestamp()[1]
        found = raw.offsets_for_times([TopicPartition(topic, partition, max(0, ts - lookback_ms))],
                                      10.0)
    except Exception as exc:  # noqa: BLE001 - no look-back rather than no replay
        log.warning("txlog/%d: no ack look-back before offset %d: %s", partition, start, exc)
        return start
    off = found[0].offset if found else -1
    return off if 0 <= off < start else start


class ReplicaReplayer:
    """Replay from the replica nodes, handover by following txlog (see the module doc).

    ``settings``: the cluster's (``load_settings()``: the same as the Peer's). ``batch`` and
    ``window``: entries per message of the stream and how many may be unacked.
    ``barrier_timeout_ms``: how long a replica waits for the queues job to cover the
    replay's barrier before it gives up (the peer then tries another replica, up to
    ``attempts`` times). ``handover_wait_s``: how long the handover, once at the txlog
    end, keeps reading for held-back messages' logged copies before it releases them as
    they are. ``handover_timeout_s``: None (the default) lets the handover run until its
    proof; a number ends it after that long without failing (held messages are released,
    the follower keeps delivering).
    ``covered`` (the default): the replay starts on what the queues job already covers
    instead of waiting for it to reach the txlog end; the peer first reads its own acks,
    failures and purges of the rest from txlog (:mod:`tidemark.peer_client.replay.tail`:
    nothing acked, dead-lettered or purged is delivered again) and the handover delivers
    the rest's Sends.
    False: the replica waits for the queues to cover the txlog end. ``delivery_limit``:
    the queues job's (default: the ``TIDEMARK_DELIVERY_LIMIT`` setting).
    ``stall_timeout_s``: how long the peer waits for the serving replica's next message
    before it gives that replica up and resumes on another (a partition drops packets
    without an error; :data:`~tidemark.gossip.replay.STALL_TIMEOUT_S`)."""

    def __init__(self, settings: Settings, *, batch: int = DEFAULT_BATCH,
                 window: int = DEFAULT_WINDOW,
                 lease_ms: int | None = None, barrier_timeout_ms: int = 300_000,
                 attempts: int = 5, handover_wait_s: float = 30.0,
                 handover_timeout_s: float | None = None, covered: bool = True,
                 delivery_limit: int | None = None,
                 stall_timeout_s: float = STALL_TIMEOUT_S,
                 epoch: Callable[[], Epoch | None] | None = None,
                 client: ReplicaClient | None = None, token: str | None = None) -> None:
        self.settings, self.token = settings, token  # token: see ReplicaClient.peer_token
        self.batch, self.window, self.lease_ms = batch, window, lease_ms
        self.barrier_timeout_ms, self.attempts = barrier_timeout_ms, attempts
        self.handover_wait_s, self.handover_timeout_s = handover_wait_s, handover_timeout_s
        self.covered, self.stall_timeout_s = covered, stall_timeout_s
        #: as the queues job counts failed deliveries (the ``delivery_limit`` setting)
        self.delivery_limit = (delivery_limit if delivery_limit is not None
                               else int(env_value("delivery_limit")))
        self.queues_behind = 0      # offsets the queues were behind the txlog end (covered)
        self._tail: Tail | None = None  # the stretch past the barrier (None: not read yet)
        self._epoch_fn = epoch
        self._own_client = client is None
        self.client = client or ReplicaClient()
        self._verifier: SignatureVerifier | None = None  # the peer's CAs (bind_transport)
        self.follower: TxlogFollower | None = None
        self._stream: Any = None    # the replay stream being read
        self.stage = "idle"
        self.replayed = 0           # replayed entries dispatched (not dropped as duplicates)
        self.replay_received = 0    # entries received from replicas, duplicates included
        self.retries = 0
        self.nodes: list[str] = []
        self.barrier = -1
        self.partition = -1
        self.handover_target = -1
        self.handover_rounds_run = 0
        self.handover_degraded = False
        self.replay_ms = 0.0
        self.handover_ms = 0.0
        self.forwarded = 0
        self.damaged = 0            # replayed entries that did not decode (left queued)
        self._lock = threading.Lock()

    def bind_transport(self, transport: Transport) -> None:
        """Replay over the peer's own transport (its certificate), unless given a client;
        the tail is checked against the transport's CAs."""
        self._verifier = verifier_of(transport)
        if self._own_client:
            self.client.close()
            self.client = ReplicaClient(transport=transport)

    def _epoch(self) -> Epoch:
        if self._epoch_fn is not None:
            epoch = self._epoch_fn()
        else:
            config = ConfigLog(self.settings)
            try:
                epoch = config.read_to_end()
            finally:
                config.close()
        if epoch is None:
            raise ReplayFailedError(f"replay needs replica nodes, and topic"
                                    f" {self.settings.topic('config')} holds no cluster config")
        return epoch

    def _count_forward(self, n: int) -> None:
        with self._lock:
            self.forwarded += n

    # ---- the replayer protocol -------------------------------------------------------------
    def run(self, core: PeerCore) -> bool:
        """Replay, then hand over; returns False: the peer goes to NORMAL, the follower
        keeps delivering what was not delivered directly to this incarnation."""
        t0 = time.monotonic()
        self.stage = "replay"
        stream = self._replay(core)
        self.replay_ms = (time.monotonic() - t0) * 1000
        t1 = time.monotonic()
        self.stage = "handover"
        try:
            self.follower = TxlogFollower(self.settings, core, self.partition, self.barrier,
                                          self._count_forward)
            self.follower.tail = self._tail or Tail()
            self.follower.delivery_limit = self.delivery_limit
            self._tail = None
            self._handover(core)
        finally:
            stream.close(release=True)
            self._stream = None
        self.handover_ms = (time.monotonic() - t1) * 1000
        self.follower.gate_wait_s = self.handover_wait_s
        self.follower.start()
        self.stage = "normal"
        log.info("peer %s: replayed %d (barrier txlog/%d@%d, %.0f ms, %d retries), handover"
                 " to %d in %.0f ms, %d forwarded", core.peer_id, self.replayed,
                 self.partition, self.barrier, self.replay_ms, self.retries,
                 self.handover_target, self.handover_ms, self.forwarded)
        return False

    def _replay(self, core: PeerCore) -> Any:
        epoch = self._epoch()
        exclude: set[str] = set()
        after = -1
        opts: dict[str, Any] = {"batch": self.batch, "window": self.window,
                                "barrier_timeout_ms": self.barrier_timeout_ms,
                                "stall_timeout_s": self.stall_timeout_s}
        if self.lease_ms is not None:
            opts["lease_ms"] = self.lease_ms
        if self.token:
            opts["token"] = self.token
        if self.covered:
            opts["covered"] = True
        for attempt in range(self.attempts):
            if self.barrier >= 0:
                # a retry resumes the replay it continues: the same barrier (which the
                # queues already cover, so no wait for them) and after what was received
                opts["barrier"] = self.barrier
            try:
                stream = self.client.replay_any(epoch, core.peer_id, core.environment,
                                                exclude=exclude, after_offset=after, **opts)
            except PeerAuthError as exc:
                raise ReplayDeniedError(f"replay of {core.peer_id} ({core.environment}) "
                                        f"refused: {exc}", exc.status) from None
            except NodeUnreachableError:
                if not exclude or attempt + 1 >= self.attempts:
                    raise
                exclude.clear()  # every other replica refused: try the first one again
                epoch = self._epoch()
                continue
            self.nodes.append(stream.node)
            self._stream = stream
            if self.barrier < 0:
                self.barrier, self.partition = stream.barrier, stream.partition
            try:
                if self._tail is None:
                    # the queues were behind: their entries below the barrier may have been
                    # acked, failed or purged since; read that stretch before replaying
                    end = int(stream.header.get("high_watermark", stream.barrier))
                    self.queues_behind = max(0, end - stream.barrier)
                    if end > stream.barrier:
                        self.stage = "reading the tail"
                    self._tail = read_tail(
                        self.settings, core.peer_id, stream.partition, stream.barrier, end,
                        admission=TxlogAdmission(core.environment,
                                                 getattr(self, "_verifier", None)))
                    self.stage = "replay"
                self._deliver(core, stream)
            except ReplayInterruptedError as exc:
                log.warning("peer %s: replay interrupted on %s after txlog offset %d (%s);"
                            " retrying on another replica", core.peer_id, stream.node,
                            stream.last_offset, exc)
                stream.close(release=False)
                self.retries += 1
                exclude.add(stream.node)
                after = max(after, stream.last_offset)
                continue
            except BaseException:
                stream.close(release=True)  # stop renewing its pin: nothing more is read
                self._stream = None
                raise
            self.barrier, self.partition = stream.barrier, stream.partition
            return stream
        raise ReplayFailedError(f"replay of {core.peer_id} failed {self.attempts} times"
                                f" (replicas tried: {', '.join(self.nodes)})")

    def _deliver(self, core: PeerCore, stream: Any) -> None:
        """Dispatch the stream's entries: each batch the replica sent is delivered in chunks
        of the stream's ack interval (decided under one lock, run per sender without a
        handoff per message), and each chunk is acked once accepted."""
        reader = EntryReader(core.environment, stream.partition)
        chunk = max(1, stream.ack_every)
        tail, limit = self._tail, self.delivery_limit
        for got in stream.entry_chunks(read_rows if tail else reader.read_message):
            if isinstance(got, Columns):  # the lean path (docs/replay.md, "A chunk as columns")
                for i in range(0, len(got), chunk):
                    cols = got if len(got) <= chunk else got.slice(i, i + chunk)
                    self.replay_received += len(cols)
                    self.replayed += core.deliver_replayed_columns(cols)
                    stream.ack(len(cols))
                continue
            for i in range(0, len(got), chunk):
                part = got[i:i + chunk]
                envs = reader.envelopes(part)
                self.replay_received += len(envs)
                if tail:
                    envs = tail.admit(envs, limit)
                self.replayed += core.deliver_replayed_batch(envs)
                stream.ack(len(part))
        self.damaged += reader.damaged

    def _handover(self, core: PeerCore) -> None:
        follower = self.follower
        assert follower is not None
        deadline = (None if self.handover_timeout_s is None
                    else time.monotonic() + self.handover_timeout_s)
        waiting_until: float | None = None
        pending: set[str] | None = None
        while True:
            target = end_offsets(self.settings, "txlog", [self.partition])[self.partition]
            self.handover_target = target
            self.handover_rounds_run += 1
            if not follower.catch_up(target, deadline):
                self.handover_degraded = True
                log.warning("peer %s: handover read txlog/%d to %d, not %d, within"
                            " handover_timeout_s=%s; going live now: held-back messages are"
                            " released (their order against logged ones of the same sender"
                            " is not kept) and the follower keeps delivering what was not"
                            " delivered directly", core.peer_id, self.partition,
                            follower.position, target, self.handover_timeout_s)
                return
            # wait for the logged copies of what was held or refused when the log's end was
            # first reached: a sender's first direct messages follow its log-only ones, so
            # once those copies went by, nothing logged before them is still to come. Live
            # messages keep arriving meanwhile; waiting for theirs too never ended under load
            if pending is None:
                pending = core.inbox.held_unseen_ids()
            else:
                pending = core.inbox.held_still_unseen(pending)
            if not pending:
                return
            # a held message's own append may land well after its direct copy (a busy
            # broker, a producer retrying): wait for the log to grow rather than spin
            now = time.monotonic()
            if waiting_until is None:
                waiting_until = now + self.handover_wait_s
            if now >= waiting_until or (deadline is not None and now >= deadline):
                break
            follower.step(0.2)
        log.warning("peer %s: %d held-back or refused live message(s) not in txlog %.0f s"
                    " after the handover reached its end; going live (a sender's messages"
                    " still wait for its refused ones, for at most as long again)",
                    core.peer_id, len(pending), self.handover_wait_s)

    def halt(self) -> None:
        """Stop dispatching (the peer is stopping); :meth:`close` releases the rest."""
        if self.follower is not None:
            self.follower.halt()

    def status(self) -> dict[str, Any]:
        """Replay and handover figures: ``stage`` is ``waiting for queues`` (the replica
        waits for the queues job to cover the barrier: ``queue_progress`` is how far it
        is), ``reading the tail`` (a covered replay reads the peer's acks past the
        barrier), ``replay``, ``handover`` (``follower_position`` towards
        ``handover_target``) or ``normal``."""
        f, stream = self.follower, self._stream
        stage, barrier, partition = self.stage, self.barrier, self.partition
        waiting: dict[str, Any] | None = None
        if stream is not None:
            waiting = stream.waiting
            if barrier < 0:
                barrier, partition = stream.barrier, stream.partition
            if stage == "replay" and not stream.streaming_entries:
                stage = "waiting for queues"
        return {"stage": stage, "replayed": self.replayed,
                "replay_received": self.replay_received,
                "duplicates_dropped": self.replay_received - self.replayed,
                "forwarded": self.forwarded, "damaged": self.damaged,
                "retries": self.retries, "nodes": self.nodes,
                "barrier": barrier, "partition": partition,
                "queues_behind": self.queues_behind,
                "queue_progress": waiting["queue_progress"] if waiting else None,
                "queue_wait_ms": waiting["waited_ms"] if waiting else None,
                "handover_target": self.handover_target,
                "handover_rounds": self.handover_rounds_run,
                "handover_degraded": self.handover_degraded,
                "replay_ms": round(self.replay_ms, 1),
                "handover_ms": round(self.handover_ms, 1),
                "follower_position": f.position if f is not None else -1,
                "skipped_direct": f.skipped_direct if f is not None else 0}

    def close(self) -> None:
        """Stop the follower and close the replica client."""
        if self.follower is not None:
            self.follower.close()
        if self._own_client:
            self.client.close()
