"""A replica node: ingest, gossip, the stable cut, GC, backfill, missing data, config changes.

Its config steps (:mod:`tidemark.replica.node_config`), gap repair
(:mod:`tidemark.replica.node_repair`) and RPC handlers (:mod:`tidemark.replica.node_rpc`) are mixins
in their own modules.

The main thread ingests and, every gossip period, recomputes the cut and the GC point and
follows the ``config`` topic; a gossip thread exchanges NodeStates with every other node of
the epoch; gRPC threads answer peers and ``tidemark replica status``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaException

from tidemark.gossip.cluster_config import ConfigLog, Epoch, Partition, append_epoch
from tidemark.gossip.gc_point import cluster_gc_point, local_gc_cut
from tidemark.gossip.node_state import NodeState, PartitionRanges
from tidemark.gossip.service import ReplicaClient, gossip_round, start_server
from tidemark.gossip.stable_cut import HoldTracker, cut_holders, stable_cut_ms
from tidemark.log.exceptions import TidemarkError
from tidemark.replica.backfill import Backfiller
from tidemark.replica.config import ClusterFile
from tidemark.replica.exceptions import ClusterConfigError, ReplicaError
from tidemark.replica.gc_worker import GcWorker
from tidemark.replica.ingest import TOPICS, Ingestor
from tidemark.replica.leases import Leases
from tidemark.replica.membership import (
    counting_owners,
    node_cut,
)
from tidemark.replica.metrics import NodeMetrics
from tidemark.replica.node_config import NodeConfigSteps
from tidemark.replica.node_repair import NodeRepair
from tidemark.replica.node_rpc import NodeRpc
from tidemark.replica.replay import ReplayService
from tidemark.replica.store import Store

__all__ = ["Node", "genesis_epoch", "step_wait", "push_due", "PUSH_SLACK"]

log = logging.getLogger(__name__)

#: A push due within this many seconds goes now: the consumer's waits are whole
#: milliseconds, so a shorter one returns at once (an empty step, hundreds a second).
PUSH_SLACK = 0.001
#: How long an ingest step waits for records when no push is pending.
IDLE_WAIT = 0.05


def step_wait(now: float, push_at: float | None) -> float:
    """How long the next ingest step may wait for records: until the pending push is due
    (``push_at``, monotonic seconds; None when none is pending), at most :data:`IDLE_WAIT`,
    and never less than :data:`PUSH_SLACK` (see :func:`push_due`)."""
    if push_at is None:
        return IDLE_WAIT
    return max(PUSH_SLACK, min(IDLE_WAIT, push_at - now))


def push_due(now: float, push_at: float) -> bool:
    """Whether a pending push goes now: at ``push_at``, or when it is closer than a wait
    the consumer can make (otherwise the loop spins through empty steps until then)."""
    return now >= push_at - PUSH_SLACK


def genesis_epoch(cf: ClusterFile) -> Epoch:
    """Epoch 1 seeded from the cluster TOML."""
    return Epoch(1, None, cf.settings.partitions,
                 {n.node_id: n.address for n in cf.nodes.values()},
                 tuple(Partition(p.name, p.log_partitions, p.replicas) for p in cf.partitions),
                 reason="seeded from " + cf.path.name)


class Node(NodeConfigSteps, NodeRepair, NodeRpc):
    """One replica node process (config steps, repair and RPC handlers are mixins)."""

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
        # GC pins as leases, persisted once the store is open; a peer pins its own partition
        self.pins = Leases(partitions=self.settings.partitions)
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
            workers=64, streams={"Replay": self.replay.handle, "Watch": self.rpc_watch},
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
                due = published + self.push_gap if unpublished else None
                applied = self.ingest.step(step_wait(time.monotonic(), due))
                self.metrics.applied.inc(applied)
                if applied:
                    unpublished = self.push_gap > 0
                    with self.progress:
                        self.progress.notify_all()
                now = time.monotonic()
                if unpublished and push_due(now, published + self.push_gap):
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
            self._update_gauges()
            self._repair()
            self._consider_promotion()
        except (KafkaException, TimeoutError, TidemarkError) as exc:  # retried next period
            log.warning("periodic work failed, will retry: %s", exc)

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

    def _update_gauges(self) -> None:
        """The cut's gauges, on the periodic tick rather than on every recomputation of the
        cut (each state change: a hundred or more a second under load; about 50 µs of
        labelled gauge updates each time)."""
        m = self.metrics
        with self.lock:
            ust, gc, held = dict(self.ust), dict(self.gc_point), self.held
            log_end = dict(self.log_end)
        m.epoch.set(self.epoch.epoch)
        for tp, o in ust.items():
            m.ust.labels(self.node_id, tp).set(o)
            m.gc_point.labels(self.node_id, tp).set(gc.get(tp, 0))
        for tp, end in log_end.items():
            m.lag.labels(self.node_id, tp).set(max(0, end - ust.get(tp, 0)))
        m.held_back.clear()
        if held:
            m.held_back.labels(self.node_id, held["node"]).set(held["seconds"])

    def collect_garbage(self) -> None:
        """One GC pass now, on the calling thread (the GC thread runs them on its own)."""
        self.gc.run_once()

    # ---- gossip ----------------------------------------------------------------------------
    def _gossip_loop(self) -> None:
        """Push-pull with every other node each period; in between, when we published, push
        at once to the other replicas of our partitions only. They are the nodes whose cut
        for those partitions (what ``WaitStable`` asks them) waits for our state; the other
        nodes learn it at the next round, which keeps the event-driven traffic to one call
        per co-replica instead of one per node, and leaves the replies undecoded."""
        next_round = 0.0
        while not self.stopping.is_set():
            self._push.wait(max(0.0, next_round - time.monotonic()))
            self._push.clear()
            if self.stopping.is_set():
                return
            now = time.monotonic()
            full = now >= next_round
            with self.lock:
                mine = self._mine
                others = {n: a for n, a in self.epoch.nodes.items() if n != self.node_id}
                if not full:
                    part = self.epoch.partition_of(self.node_id)
                    mates = set(part.replicas) | set(part.joining) if part else set()
                    others = {n: a for n, a in others.items() if n in mates}
            if full:
                next_round = now + self.period
            gossip_round(self.peers, mine, others, self._receive if full else None,
                         max(0.5, self.period * 2), self.pool)

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
