"""A replica node's gossip: the NodeState it publishes, the push-pull rounds with the other
nodes, event-driven pushes to its co-replicas, and the states it receives."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tidemark.gossip.exceptions import PeerForbiddenError
from tidemark.gossip.gc_point import local_gc_cut
from tidemark.gossip.node_state import NodeState, PartitionRanges
from tidemark.gossip.service import ReplicaClient, gossip_round, serving_identity
from tidemark.log import clock
from tidemark.replica.backfill import Backfiller
from tidemark.replica.cut import CutKeeper
from tidemark.replica.epochs import EpochFollower
from tidemark.replica.ingest import TOPICS, Ingestor
from tidemark.replica.leases import Leases
from tidemark.replica.store import Store
from tidemark.replica.view import ClusterView

__all__ = ["Gossiper"]


class Gossiper:
    """Publishes this node's state into ``view`` and exchanges states with the others."""

    def __init__(self, view: ClusterView, cut: CutKeeper, store: Store, ingest: Ingestor,
                 pins: Leases, backfiller: Backfiller, epochs: EpochFollower,
                 peers: ReplicaClient, period: float, stopping: threading.Event) -> None:
        self.view, self.cut, self.store, self.ingest = view, cut, store, ingest
        self.pins, self.backfiller, self.epochs = pins, backfiller, epochs
        self.peers, self.period, self.stopping = peers, period, stopping
        self.pool = ThreadPoolExecutor(max_workers=8)
        self._push = threading.Event()  # our state changed: gossip it now
        self._mine = b""  # our latest state, encoded (under view.lock)
        #: the seconds one full round took (e.g. a histogram's ``observe``); pushes are not
        #: rounds and are not timed
        self.on_round: Callable[[float], object] = lambda seconds: None

    def own_state(self) -> NodeState:
        """This node's NodeState now."""
        view, node_id = self.view, self.view.node_id
        part = view.partition()
        # A joining replica announces caught_up once it is ready to be promoted; from then
        # on it counts toward the cut, so its promotion cannot make the cut cover a gap.
        joining = node_id in part.joining
        ranges, caught_up = [], not joining or self.epochs.promoting_since is not None
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
        with view.lock:
            cut = local_gc_cut(self.cut.ust, list(self.pins.values()))
            pins: dict[str, int] = {}
            for pin in self.pins.values():
                for tp, o in pin.items():
                    pins[tp] = min(o, pins.get(tp, o))
        return NodeState(node_id, view.epoch.epoch, clock.now_ms(), caught_up,
                         tuple(ranges), {tp: o for tp, o in cut.items() if tp in owned}, pins,
                         view.epoch.nodes[node_id], dict(self.cut.ust), self.cut.ust_ms,
                         self.backfiller.status,
                         self.store.gossip_losses())

    def publish(self) -> None:
        """Take this node's state now as the one it gossips."""
        state = self.own_state()
        with self.view.lock:
            self.view.set_own(state)
            self._mine = state.encode()

    def push(self) -> None:
        """Push the published state to the co-replicas at once (:meth:`run` does)."""
        self._push.set()

    def exchange(self, body: bytes) -> bytes:
        """Push-pull (the ``Gossip`` method): take the caller's state, answer with ours. Over
        TLS a node speaks only for itself: a state naming another node is refused."""
        state = NodeState.decode(body)
        caller = serving_identity()
        if caller is not None and caller.name != state.node_id:
            raise PeerForbiddenError(f"gossip refused: {caller} sent the state of"
                                     f" {state.node_id!r}")
        self.receive(state)
        with self.view.lock:
            return self._mine

    def receive(self, state: NodeState) -> None:
        """Take another node's state; a newer one makes the cut recompute."""
        if self.view.receive(state):
            self.cut.request()

    def run(self) -> None:
        """Push-pull with every other node each period; in between, when we published, push
        at once to the other replicas of our partitions only. They are the nodes whose cut
        for those partitions (what ``WaitStable`` asks them) waits for our state; the other
        nodes learn it at the next round, which keeps the event-driven traffic to one call
        per co-replica instead of one per node, and leaves the replies undecoded."""
        view, node_id = self.view, self.view.node_id
        next_round = 0.0
        while not self.stopping.is_set():
            self._push.wait(max(0.0, next_round - time.monotonic()))
            self._push.clear()
            if self.stopping.is_set():
                return
            now = time.monotonic()
            full = now >= next_round
            with view.lock:
                mine = self._mine
                others = {n: a for n, a in view.epoch.nodes.items() if n != node_id}
                if not full:
                    part = view.epoch.partition_of(node_id)
                    mates = set(part.replicas) | set(part.joining) if part else set()
                    others = {n: a for n, a in others.items() if n in mates}
            if full:
                next_round = now + self.period
            started = time.perf_counter() if full else 0.0
            gossip_round(self.peers, mine, others, self.receive if full else None,
                         max(0.5, self.period * 2), self.pool)
            if full:
                self.on_round(time.perf_counter() - started)
