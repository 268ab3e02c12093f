"""A replica node: ingest, gossip, the stable cut, GC, backfill, missing data, config changes.

:class:`Node` builds one collaborator per concept and wires them: what it knows of the cluster
(:mod:`tidemark.replica.view`), the cut (:mod:`tidemark.replica.cut`), gossip
(:mod:`tidemark.replica.gossiper`), config epochs (:mod:`tidemark.replica.epochs`), gap repair
(:mod:`tidemark.replica.repair`), the waits on its ends (:mod:`tidemark.replica.ends`) and its
gRPC methods (:mod:`tidemark.replica.rpc`).

The main thread ingests and, every gossip period, recomputes the cut and the GC point and
follows the ``config`` topic; a gossip thread exchanges NodeStates with every other node of
the epoch; a cut thread recomputes the cut as soon as a state changed; gRPC threads answer
peers and ``tidemark replica status``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

import grpc
from confluent_kafka import KafkaException

from tidemark.gossip.cluster_config import ConfigLog, Epoch, Partition, append_epoch
from tidemark.gossip.health import health_servicer, set_serving
from tidemark.gossip.pki import Identity
from tidemark.gossip.record_signing import verifier_of
from tidemark.gossip.service import ReplicaClient
from tidemark.gossip.tls import local_pki_dir, resolve_transport
from tidemark.gossip.txlog_admission import TxlogAdmission
from tidemark.log.exceptions import TidemarkError
from tidemark.replica.backfill import Backfiller
from tidemark.replica.config import ClusterFile
from tidemark.replica.cut import CutKeeper
from tidemark.replica.ends import Ends
from tidemark.replica.epochs import EpochFollower, rejoin_if_new_store
from tidemark.replica.exceptions import ClusterConfigError, ReplicaError
from tidemark.replica.gc_worker import GcWorker
from tidemark.replica.gossiper import Gossiper
from tidemark.replica.ingest import Ingestor
from tidemark.replica.leases import Leases
from tidemark.replica.metrics import NodeMetrics
from tidemark.replica.repair import Repairer
from tidemark.replica.replay import ReplayService
from tidemark.replica.rpc import ReplicaServicer
from tidemark.replica.store import Store
from tidemark.replica.view import ClusterView

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


class Node:
    """One replica node process: :meth:`start` builds and wires its collaborators,
    :meth:`run` ingests until stopped, :meth:`close` stops everything."""

    # built by start(); close() stops those that exist
    store: Store
    config: ConfigLog
    view: ClusterView
    cut: CutKeeper
    metrics: NodeMetrics
    ingest: Ingestor
    backfiller: Backfiller
    gc: GcWorker
    replay: ReplayService
    epochs: EpochFollower
    repairer: Repairer
    gossiper: Gossiper
    server: grpc.Server
    health: Any

    def __init__(self, cf: ClusterFile, node_id: str, insecure: bool | None = None) -> None:
        self.cf, self.node_id, self.settings = cf, node_id, cf.settings
        # mutual TLS as this node (fails closed: no material and not insecure = no start);
        # the local stack's CA sits beside its cluster file
        local = cf.path.parent if (local_pki_dir(cf.path.parent) / "trust.pem").is_file() else None
        self.transport = resolve_transport(Identity("node", node_id), insecure=insecure,
                                           state_dir=local)
        self.period = cf.gossip_interval_ms / 1000
        self.push_gap = cf.gossip_push_ms / 1000
        self.progress = threading.Condition()  # notified when records apply or the cut moves
        self.stopping = threading.Event()
        # GC pins as leases, persisted once the store is open; a peer pins its own partition
        self.pins = Leases(partitions=self.settings.partitions)
        self.peers = ReplicaClient(cf.secret or None, self.transport)  # gossip and backfill
        # the txlog records it applies: its environment's; in secure mode, Acks, Purges and
        # DeliveryFailed only when signed by who may write them (the node's CAs and CRL)
        self.admission = TxlogAdmission(self.settings.environment, verifier_of(self.transport))

    # ---- startup ---------------------------------------------------------------------------
    def start(self) -> None:
        """Open the store, read the config to its end, serve, assign partitions."""
        self.store = store = Store(self.cf.data_dir / self.node_id, self.node_id,
                                   options=self.cf.store)
        if store.adopted_from:
            log.warning("%s adopted a copy of %s's store: its ranges are gaps until verified "
                        "against a peer by digest", self.node_id, store.adopted_from)
        self.config = ConfigLog(self.settings)
        epoch = self._first_epoch()
        self.pins.open(store)
        epoch = rejoin_if_new_store(self.settings, self.config, store, self.node_id, epoch)
        self.view = view = ClusterView(self.node_id, epoch, self.cf.down_after_ms / 1000)
        self.cut = cut = CutKeeper(view, store, self.progress, self.period)
        cut.load()
        self.metrics = metrics = NodeMetrics(self.node_id)
        spec = self.cf.nodes.get(self.node_id)
        metrics.serve(spec.metrics_port if spec else 0, host=self.cf.metrics_host)
        self.ingest = ingest = Ingestor(self.settings, store, self.node_id,
                                        sync=self.cf.sync_writes, admission=self.admission)
        ingest.on_poison = metrics.deadletters.inc
        ingest.on_refused = metrics.refused_records
        ingest.on_batch = metrics.ingest_batch.observe
        ingest.assign(view.partition().log_partitions)
        self.backfiller = Backfiller(store, self.peers, admission=self.admission)
        self.gc = GcWorker(store, lambda: list(ingest.partitions), lambda: dict(cut.gc_point),
                           self.cf.release, on_released=metrics.released.inc,
                           idle=ingest.has_slack)
        self.gc.start()  # GC runs off the ingest path, in bounded passes
        self.replay = ReplayService(self.node_id, self.settings, store, self.pins,
                                    lambda: ingest.partitions, lambda: dict(cut.gc_point),
                                    self.progress, self.stopping)
        self.epochs = EpochFollower(self.settings, self.config, view, cut, store, ingest,
                                    self.period, self.stopping)
        self.repairer = Repairer(view, store, self.config, ingest, self.backfiller, metrics)
        self.gossiper = Gossiper(view, cut, store, ingest, self.pins, self.backfiller,
                                 self.epochs, self.peers, self.period, self.stopping)
        self.gossiper.on_round = metrics.gossip_round.observe
        self.gossiper.publish()
        ends = Ends(self.node_id, store, cut, ingest, self.progress, self.stopping,
                    self.cf.watch_gap_ms / 1000)
        servicer = ReplicaServicer(view, cut, store, self.pins, self.gossiper, ends,
                                   self.replay)
        # grpc.health.v1.Health beside the replica service (`tidemark replica health`)
        self.health = health_servicer(self.transport)
        self.server = servicer.serve(epoch.nodes[self.node_id], secret=self.cf.secret or None,
                                     environment=self.settings.environment,
                                     transport=self.transport, health=self.health)
        set_serving(self.health, True)
        threading.Thread(target=self.gossiper.run, name="gossip", daemon=True).start()
        threading.Thread(target=cut.run, args=(self.stopping,), name="cut",
                         daemon=True).start()
        log.info("node %s up: epoch %d, partitions %s, metrics port %d", self.node_id,
                 epoch.epoch, view.partition().log_partitions, metrics.port)

    def _first_epoch(self) -> Epoch:
        """The config read to its end (seeded with :func:`genesis_epoch` if empty); this
        node must be in it."""
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
        return epoch

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
                    self.gossiper.publish()
                    published, unpublished = now, False
                    self.gossiper.push()
                    self.cut.request()
                if now >= next_tick:
                    self.tick()
                    if self.admission.verifier is not None:
                        self.admission.verifier.refresh_crl()  # revocations count from now
                    next_tick = now + self.period
        finally:
            self.close()
        return 0

    def close(self) -> None:
        """Stop serving and close everything."""
        self.stopping.set()
        if getattr(self, "health", None) is not None:
            set_serving(self.health, False)  # probes see NOT_SERVING while it stops
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
            self.epochs.follow()
            if self.stopping.is_set():
                return
            self.gossiper.publish()
            self.cut.recompute()
            self.cut.update_gauges(self.metrics)
            self.repairer.step()
            self.epochs.consider_promotion()
        except (KafkaException, TimeoutError, TidemarkError) as exc:  # retried next period
            log.warning("periodic work failed, will retry: %s", exc)
