"""A replica node: ingest, gossip, the stable cut, GC, backfill, missing data, config changes.

The main thread ingests and, every gossip period, recomputes the cut and the GC point and
follows the ``config`` topic; a gossip thread exchanges NodeStates with every other node of
the epoch; gRPC threads answer peers and ``tidemark replica status``.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaException

from gossip.cluster_config import ConfigLog, Epoch, Partition, append_epoch
from gossip.gc_point import cluster_gc_point, local_gc_cut
from gossip.missing import unrecoverable
from gossip.node_state import NodeState, PartitionRanges
from gossip.service import ReplicaClient, gossip_round, pack_records, start_server
from gossip.stable_cut import HoldTracker, cut_holders, stable_cut_ms
from log.exceptions import TidemarkError
from log.offsets import end_offsets
from replica.backfill import Backfiller, serve_digest
from replica.config import ClusterFile
from replica.exceptions import ClusterConfigError, ReplicaError
from replica.ingest import TOPICS, Ingestor
from replica.leases import Leases
from replica.membership import (
    PromotionInput,
    counting_owners,
    node_cut,
    promoted_epoch,
    promotion_step,
    rejoin_epoch,
)
from replica.metrics import NodeMetrics
from replica.release_policy import GcWorker
from replica.replay import ReplayService
from replica.status import StatusSnapshot, build_status
from replica.store import Store

__all__ = ["Node", "genesis_epoch"]

log = logging.getLogger(__name__)


def genesis_epoch(cf: ClusterFile) -> Epoch:
    """Epoch 1 seeded from the cluster TOML."""
    return Epoch(1, None, cf.settings.partitions,
                 {n.node_id: n.address for n in cf.nodes.values()},
                 tuple(Partition(p.name, p.log_partitions, p.replicas) for p in cf.partitions),
                 reason="seeded from " + cf.path.name)


class Node:
    """One replica node process."""

    def __init__(self, cf: ClusterFile, node_id: str) -> None:
        self.cf, self.node_id, self.settings = cf, node_id, cf.settings
        self.period = cf.gossip_interval_ms / 1000
        self.push_gap = cf.gossip_push_ms / 1000
        self._push = threading.Event()     # our state changed: gossip it now
        self._cut_due = threading.Event()  # a state changed: recompute the cut now
        self._cut_lock = threading.Lock()  # one recomputation at a time, saved in order
        self.lock = threading.RLock()
        self.progress = threading.Condition()  # notified when records apply or the cut moves
        self.stopping = threading.Event()
        self.states: dict[str, NodeState] = {}
        self.last_seen: dict[str, float] = {}
        self.ust: dict[str, int] = {}
        self.ust_ms = 0
        self.ust_epoch = 0  # the config epoch the cut was computed in: the UST is (epoch, cut)
        self.gc_point: dict[str, int] = {}
        self.pins = Leases()  # GC pins as leases, persisted once the store is open
        self.tracker = HoldTracker()
        self.held: dict[str, Any] | None = None
        self.log_end: dict[str, int] = {}
        self.removed = False
        self.promoting_since: float | None = None
        self._mine = b""
        self.peers = ReplicaClient(cf.secret or None)  # signs gossip and backfill calls
        self.pool = ThreadPoolExecutor(max_workers=8)

    # ---- startup ---------------------------------------------------------------------------
    def start(self) -> None:
        """Open the store, read the config to its end, serve, assign partitions."""
        self.store = Store(self.cf.data_dir / self.node_id, self.node_id,
                           options=self.cf.store)
        if self.store.adopted_from:
            log.warning("%s adopted a copy of %s's store: its ranges are gaps until verified "
                        "against a peer by digest", self.node_id, self.store.adopted_from)
        self.config = ConfigLog(self.settings)
        try:
            epoch = self.config.read_to_end()
        except (KafkaException, TimeoutError) as exc:
            detail = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
            raise ReplicaError(f"cannot read the config topic from Kafka at "
                               f"{self.settings.bootstrap}: {detail}") from None
        if epoch is None:
            if self.node_id not in self.cf.nodes:
                raise ClusterConfigError(f"node {self.node_id!r} is not in {self.cf.path}")
            append_epoch(self.settings, genesis_epoch(self.cf))
            epoch = self.config.read_to_end()
        if epoch is None or epoch.partition_of(self.node_id) is None:
            known = ", ".join(sorted(epoch.nodes)) if epoch else "none"
            raise ClusterConfigError(f"node {self.node_id!r} is not in cluster config epoch "
                                     f"{epoch.epoch if epoch else 0} (nodes: {known})")
        self.epoch = epoch
        self.pins.open(self.store)
        self._rejoin_if_new_store()
        doc = self.store.load_cut()
        if doc:
            self.ust, self.gc_point, self.ust_ms = doc["ust"], doc["gc"], doc.get("ust_ms", 0)
            self.ust_epoch = doc.get("epoch", 0)
        self.metrics = NodeMetrics(self.node_id)
        spec = self.cf.nodes.get(self.node_id)
        self.metrics.serve(spec.metrics_port if spec else 0, host=self.cf.metrics_host)
        self.ingest = Ingestor(self.settings, self.store, self.node_id, sync=self.cf.sync_writes)
        self.ingest.on_poison = self.metrics.deadletters.inc
        self.ingest.assign(self._partition().log_partitions)
        self.backfiller = Backfiller(self.store, self.peers)
        self.gc = GcWorker(self.store, lambda: list(self.ingest.partitions),
                           lambda: dict(self.gc_point), self.cf.release,
                           on_released=self.metrics.released.inc, idle=self.ingest.has_slack)
        self.gc.start()  # GC runs off the ingest path, in bounded passes
        self.replay = ReplayService(self.node_id, self.settings, self.store, self.pins,
                                    lambda: self.ingest.partitions, lambda: dict(self.gc_point),
                                    self.progress, self.stopping)
        self._publish()
        self.server = start_server(epoch.nodes[self.node_id], {
            "Gossip": self.rpc_gossip, "Status": self.rpc_status, "Digest": self.rpc_digest,
            "Fetch": self.rpc_fetch, "Pin": self.rpc_pin, "Unpin": self.rpc_unpin,
            "RenewPin": self.rpc_renew_pin,
            "WaitApplied": self.rpc_wait_applied, "WaitStable": self.rpc_wait_stable},
            workers=64, streams={"Replay": self.replay.handle},
            secret=self.cf.secret or None,  # gossip, status, backfill: cluster members only
            environment=self.settings.environment)  # replay, pins: peer tokens of this env
        threading.Thread(target=self._gossip_loop, name="gossip", daemon=True).start()
        threading.Thread(target=self._cut_loop, name="cut", daemon=True).start()
        log.info("node %s up: epoch %d, partitions %s, metrics port %d", self.node_id,
                 epoch.epoch, self._partition().log_partitions, self.metrics.port)

    def run(self) -> int:
        """Run until SIGTERM/SIGINT or removal from the config; returns an exit code."""
        signal.signal(signal.SIGTERM, lambda *_: self.stopping.set())
        signal.signal(signal.SIGINT, lambda *_: self.stopping.set())
        next_tick, published, unpublished = 0.0, 0.0, False
        try:
            while not self.stopping.is_set():
                wait = 0.05
                if unpublished:
                    wait = max(0.0, min(wait, published + self.push_gap - time.monotonic()))
                applied = self.ingest.step(wait)
                self.metrics.applied.inc(applied)
                if applied:
                    unpublished = self.push_gap > 0
                    with self.progress:
                        self.progress.notify_all()
                now = time.monotonic()
                if unpublished and now >= published + self.push_gap:
                    # event-driven gossip: the others learn what we applied at once
                    self._publish()
                    published, unpublished = now, False
                    self._push.set()
                    self._cut_due.set()
                if now >= next_tick:
                    self.tick()
                    next_tick = now + self.period
        finally:
            self.close()
        return 0

    def close(self) -> None:
        """Stop serving and close everything."""
        self.stopping.set()
        if getattr(self, "gc", None) is not None:
            self.gc.stop()  # before the store closes under it
        if getattr(self, "server", None) is not None:
            self.server.stop(0.5)
        for part in ("ingest", "config"):
            if getattr(self, part, None) is not None:
                getattr(self, part).close()
        if getattr(self, "store", None) is not None:
            self.store.close()
        self.peers.close()

    # ---- periodic work ---------------------------------------------------------------------
    def tick(self) -> None:
        """Follow the config, publish our state, recompute cut / GC point, repair gaps."""
        try:
            self.pins.expire()  # leases of peers that stopped renewing
            self._follow_config()
            if self.stopping.is_set():
                return
            self._publish()
            self._recompute()
            self._repair()
            self._consider_promotion()
        except (KafkaException, TimeoutError, TidemarkError) as exc:  # retried next period
            log.warning("periodic work failed, will retry: %s", exc)

    def _rejoin_if_new_store(self, attempts: int = 5) -> None:
        """A new store stays new (``Store.created``) until the epoch moving this node to
        ``joining`` is committed: a failed read or append leaves it new for the next start."""
        for _ in range(attempts):
            part = self.epoch.partition_of(self.node_id)
            has_data = bool(self.store.created and part is not None and any(
                end_offsets(self.settings, "txlog", part.log_partitions).values()))
            successor = rejoin_epoch(self.epoch, self.node_id, self.store.created, has_data)
            if successor is None:  # nothing to rejoin, or the rejoin is already committed
                if self.store.created:
                    self.store.mark_complete()
                return
            log.warning("store of %s is new: rejoining as a joining replica", self.node_id)
            append_epoch(self.settings, successor)
            self.epoch = self.config.read_to_end() or self.epoch  # a competing change may win
        raise ReplicaError(f"{self.node_id}: the rejoin epoch was not committed after "
                           f"{attempts} attempts (competing config changes); the store stays "
                           f"new and the next start retries")

    def _consider_promotion(self) -> None:
        part = self.epoch.partition_of(self.node_id)
        if part is None or self.node_id not in part.joining:
            return
        now = time.monotonic()
        with self.lock:
            fresh = {n: self.states[n] for n in part.replicas if n in self.states
                     and now - self.last_seen.get(n, -1e9) < self.cf.down_after_ms / 1000}
            inp = PromotionInput(
                self.node_id, self.epoch, fresh, dict(self.states), dict(self.ust),
                {f"{t}/{k}": self.store.map(t, k) for k in part.log_partitions for t in TOPICS},
                frozenset(self.ingest.high), self.promoting_since, now, self.period)
        action = promotion_step(inp)
        if action == "announce":
            self.promoting_since = now  # counted toward the cut from now on
            log.warning("%s caught up; announcing it before promotion", self.node_id)
        elif action == "withdraw":
            self.promoting_since = None
        elif action == "promote":
            log.warning("caught up: promoting %s to a counting replica of %s", self.node_id,
                        part.name)
            append_epoch(self.settings, promoted_epoch(self.epoch, self.node_id))
            self._follow_config()

    def _follow_config(self) -> None:
        new = self.config.poll()
        if new is None or new is self.epoch:
            return
        log.warning("config epoch %d -> %d (%s)", self.epoch.epoch, new.epoch, new.reason)
        with self.lock:
            self.epoch = new
            for gone in set(self.states) - set(new.nodes):
                self.states.pop(gone, None)
                self.last_seen.pop(gone, None)
        part = new.partition_of(self.node_id)
        if part is None:
            log.warning("node %s was removed from the config in epoch %d; stopping",
                        self.node_id, new.epoch)
            self.removed = True
            self.stopping.set()
        elif sorted(part.log_partitions) != self.ingest.partitions:
            self.ingest.assign(part.log_partitions)

    def _partition(self) -> Partition:
        """This node's replica partition in the current epoch (it is in the epoch while it
        runs: removal stops it)."""
        part = self.epoch.partition_of(self.node_id)
        if part is None:
            raise ReplicaError(f"node {self.node_id} is not in epoch {self.epoch.epoch}")
        return part

    def _own_state(self) -> NodeState:
        part = self._partition()
        # A joining replica announces caught_up once it is ready to be promoted; from then
        # on it counts toward the cut, so its promotion cannot make the cut cover a gap.
        joining = self.node_id in part.joining
        ranges, caught_up = [], not joining or self.promoting_since is not None
        for k in part.log_partitions:
            for topic in TOPICS:
                m = self.store.map(topic, k)
                tp = f"{topic}/{k}"
                if topic == "txlog" and m.detached:
                    caught_up = False
                ranges.append(PartitionRanges(topic, k, m.floor, m.base_end,
                                              self.ingest.high.get(tp, 0),
                                              tuple((a, b) for a, b in m.detached),
                                              self.ingest.caught_up_ms.get(tp, 0)))
        owned = {r.tp for r in ranges}
        with self.lock:
            cut = local_gc_cut(self.ust, list(self.pins.values()))
            pins: dict[str, int] = {}
            for pin in self.pins.values():
                for tp, o in pin.items():
                    pins[tp] = min(o, pins.get(tp, o))
        return NodeState(self.node_id, self.epoch.epoch, int(time.time() * 1000), caught_up,
                         tuple(ranges), {tp: o for tp, o in cut.items() if tp in owned}, pins,
                         self.epoch.nodes[self.node_id], dict(self.ust), self.ust_ms,
                         self.backfiller.status,
                         self.store.gossip_losses())

    def _publish(self) -> None:
        state = self._own_state()
        with self.lock:
            self.states[self.node_id] = state
            self.last_seen[self.node_id] = time.monotonic()
            self._mine = state.encode()

    def _cut_loop(self) -> None:
        """Recompute the cut as soon as a state changed (a push, a gossip reply)."""
        while not self.stopping.is_set():
            if not self._cut_due.wait(self.period):
                continue
            self._cut_due.clear()
            if self.stopping.is_set():
                return
            try:
                self._recompute()
            except Exception as exc:  # noqa: BLE001 - the periodic tick retries
                log.warning("cut recomputation failed, will retry: %s", exc)

    def _recompute(self) -> None:
        with self._cut_lock:
            self._recompute_now()

    def _recompute_now(self) -> None:
        with self.lock:
            views = {n: s.view() for n, s in self.states.items()}
            owners = counting_owners(self.epoch, self.states)
            ust = node_cut(self.epoch, self.states, self.ust)  # from the replicas' own maps
            ust_ms = stable_cut_ms(owners, views, self.ust_ms)
            gc_cuts = {n: v.gc_cut for n, v in views.items()}
            gc = cluster_gc_point(owners, gc_cuts, ust, self.gc_point)
            log_end: dict[str, int] = {}
            for v in views.values():
                for tp, end in v.log_end.items():
                    log_end[tp] = max(log_end.get(tp, 0), end)
            holders = cut_holders(owners, views, log_end)
            self.held = self.tracker.update(holders, time.monotonic())
            changed = ust != self.ust or gc != self.gc_point
            changed = changed or self.ust_epoch != self.epoch.epoch
            self.ust, self.gc_point, self.ust_ms, self.log_end = ust, gc, ust_ms, log_end
            self.ust_epoch = self.epoch.epoch
        if changed:
            with self.progress:
                self.progress.notify_all()
        if changed:
            self.store.save_cut(ust, gc, ust_ms, self.ust_epoch)
        m = self.metrics
        m.epoch.set(self.epoch.epoch)
        for tp, o in ust.items():
            m.ust.labels(self.node_id, tp).set(o)
            m.gc_point.labels(self.node_id, tp).set(gc.get(tp, 0))
        for tp, end in log_end.items():
            m.lag.labels(self.node_id, tp).set(max(0, end - ust.get(tp, 0)))
        m.held_back.clear()
        if self.held:
            m.held_back.labels(self.node_id, self.held["node"]).set(self.held["seconds"])

    def _repair(self) -> None:
        """Backfill gaps from peers; splice ranges that nobody can have (missing data)."""
        part = self._partition()
        with self.lock:
            maps = {n: s.maps() for n, s in self.states.items()}
            fresh = {n for n, t in self.last_seen.items()
                     if time.monotonic() - t < self.cf.down_after_ms / 1000}
        addresses = {n: a for n, a in self.epoch.nodes.items() if n != self.node_id and n in fresh}
        for k in part.log_partitions:
            tp = f"txlog/{k}"
            if not self.store.map("txlog", k).detached:
                continue
            peer_maps = {n: m[tp] for n, m in maps.items() if tp in m and n != self.node_id}
            try:
                self.backfiller.step(k, peer_maps, addresses,
                                     on_copied=self.metrics.backfilled.inc,
                                     on_skipped=self.metrics.backfill_skipped.inc)
            except Exception as exc:  # a peer went away mid-copy: retry next tick
                log.warning("backfill of %s paused: %s", tp, exc)
            holders = self.epoch.holders()[tp]
            if any(h not in fresh for h in holders):
                continue
            lost = unrecoverable(holders, {n: m[tp] for n, m in maps.items() if tp in m},
                                 self.ingest.low.get(tp, 0))
            if lost:
                self._splice(k, lost)

    def _splice(self, k: int, lost: list[tuple[int, int]]) -> None:
        epoch = self.config.read_to_end()  # strongly consistent: no newer config may hold it
        if epoch is not self.epoch:
            return
        batch = self.store.batch()
        key = self.store.next_loss_key()
        for i, (a, b) in enumerate(lost):
            batch.map("txlog", k).splice(a, b)
            entry = {"topic": "txlog", "partition": k, "start": a, "end": b,
                     "epoch": epoch.epoch, "node": self.node_id,
                     "detected_ms": int(time.time() * 1000)}
            batch.put(key[:1] + (int.from_bytes(key[1:], "big") + i).to_bytes(8, "big"),
                      json.dumps(entry).encode())
            self.metrics.lost.labels(self.node_id, f"txlog/{k}").inc(b - a)
            log.error("DATA LOST: txlog/%d [%d, %d) is held by no replica and is gone from "
                      "Kafka; spliced into the interval map and recorded in the loss ledger",
                      k, a, b)
        batch.commit()

    def collect_garbage(self) -> None:
        """One GC pass now, on the calling thread (the GC thread runs them on its own)."""
        self.gc.run_once()

    # ---- gossip ----------------------------------------------------------------------------
    def _gossip_loop(self) -> None:
        """Push-pull with every other node each period, and at once when we published."""
        while not self.stopping.is_set():
            self._push.wait(self.period)
            self._push.clear()
            if self.stopping.is_set():
                return
            with self.lock:
                mine = self._mine
                others = {n: a for n, a in self.epoch.nodes.items() if n != self.node_id}
            gossip_round(self.peers, mine, others, self._receive, max(0.5, self.period * 2),
                         self.pool)

    def _receive(self, state: NodeState) -> None:
        node = state.node_id
        if state.timestamp_ms > time.time() * 1000 + 60_000:
            log.warning("ignoring a state of %s stamped in the future", node)
            return  # it would shadow the node's real states for good
        with self.lock:
            if node == self.node_id or node not in self.epoch.nodes:
                return  # removed nodes are no longer listened to
            old = self.states.get(node)
            newer = old is None or old.timestamp_ms <= state.timestamp_ms
            if newer:
                self.states[node] = state
            self.last_seen[node] = time.monotonic()
        if newer:
            self._cut_due.set()

    # ---- RPC handlers ----------------------------------------------------------------------
    def rpc_gossip(self, body: bytes) -> bytes:
        """Push-pull: take the caller's state, answer with ours."""
        self._receive(NodeState.decode(body))
        with self.lock:
            return self._mine

    def rpc_status(self, body: bytes) -> bytes:
        """The ``replica status --json`` document."""
        doc = build_status(self.snapshot())
        doc["deadletter_ledger"] = self.store.dead_letters(limit=100)  # this node's own
        doc["ust_epoch"] = self.ust_epoch
        return json.dumps(doc).encode()

    def snapshot(self) -> StatusSnapshot:
        """What the node knows now, for the status document."""
        now = time.monotonic()
        with self.lock:
            return StatusSnapshot(
                self.node_id, self.epoch, dict(self.states),
                {n: now - t for n, t in self.last_seen.items()}, self.cf.down_after_ms / 1000,
                dict(self.ust), self.ust_ms, dict(self.gc_point), dict(self.log_end),
                dict(self.held) if self.held else None, self.replay.pin_rows())

    def rpc_digest(self, body: bytes) -> bytes:
        """Digest and count of stored records in a range (backfill equality check), bounded
        by ``max_bytes`` when asked (:func:`replica.backfill.serve_digest`)."""
        return serve_digest(self.store, body)

    def _wait(self, body: bytes, reached: Callable[[int, int], bool]) -> bytes:
        """Block until ``reached(partition, offset)`` or the request's deadline."""
        req = json.loads(body)
        k, offset = int(req["partition"]), int(req["offset"])
        if k not in self.ingest.partitions:
            raise ReplicaError(f"{self.node_id} does not own txlog/{k}")
        deadline = time.monotonic() + min(float(req.get("timeout_ms", 5000)), 60_000) / 1000
        with self.progress:
            while not reached(k, offset) and not self.stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.progress.wait(min(left, 0.5))
        return json.dumps({"reached": reached(k, offset), "node": self.node_id,
                           "applied_end": self.store.map("txlog", k).base_end,
                           "stable_end": self.ust.get(f"txlog/{k}", 0)}).encode()

    def rpc_wait_applied(self, body: bytes) -> bytes:
        """``{partition, offset, timeout_ms}`` -> ``{reached, ...}`` once this node applied
        txlog offset ``offset`` (its contiguous base covers it) or the timeout passed."""
        return self._wait(body, lambda k, o: self.store.map("txlog", k).base_end > o)

    def rpc_wait_stable(self, body: bytes) -> bytes:
        """Like ``WaitApplied``, until the universal stable cut covers the offset."""
        return self._wait(body, lambda k, o: self.ust.get(f"txlog/{k}", 0) > o)

    def rpc_fetch(self, body: bytes) -> bytes:
        """Stored records of a range."""
        req = json.loads(body)
        return pack_records(self.store.records(req["partition"], req["start"], req["end"]))

    def rpc_pin(self, body: bytes) -> bytes:
        """``{barrier: {tp: offset}, lease_ms?, owner?}`` -> ``{pin, barrier, lease_ms,
        expires_ms}``: a lease (:mod:`replica.leases`) holding the GC point at ``barrier``
        (raised to the current GC point) until unpinned or not renewed for ``lease_ms``."""
        req = json.loads(body)
        with self.lock:
            gc_point = dict(self.gc_point)
        lease = self.pins.grant(req["barrier"], gc_point, req.get("lease_ms"),
                                str(req.get("owner", "")))
        return json.dumps({"pin": lease.pin, "barrier": lease.barrier,
                           "lease_ms": lease.lease_ms, "expires_ms": lease.expires_ms}).encode()

    def rpc_renew_pin(self, body: bytes) -> bytes:
        """``{pin, lease_ms?}`` -> ``{renewed, expires_ms}``."""
        req = json.loads(body)
        lease = self.pins.renew(req["pin"], req.get("lease_ms"))
        return json.dumps({"renewed": lease is not None,
                           "expires_ms": lease.expires_ms if lease else None}).encode()

    def rpc_unpin(self, body: bytes) -> bytes:
        """``{pin}`` -> ``{released}``."""
        return json.dumps({"released": self.pins.release(json.loads(body)["pin"])}).encode()

