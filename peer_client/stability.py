"""Durability ``quorum`` and ``all``, answered by the replica nodes (``WaitApplied`` and
``WaitStable`` of the replica service): each node replies when the condition holds, so the
peer never polls. Waits are batched per (level, partition): one call waits for the oldest
pending Send of that partition, and its answer settles every Send below the end it reports."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gossip.cluster_config import ConfigLog, Epoch
from gossip.durability import wait_replicated
from gossip.exceptions import DurabilityTimeoutError as ReplicaTimeout
from gossip.service import ReplicaClient
from log.settings import Settings
from peer_client.exceptions import DurabilityTimeoutError, DurabilityUnavailableError

__all__ = ["ReplicaStability"]

log = logging.getLogger("peer_client.stability")
Done = Callable[[BaseException | None], None]


class ReplicaStability:
    """A :class:`~peer_client.ports.StabilityPort` over the replica cluster of ``settings``."""

    def __init__(self, settings: Settings, timeout_ms: int, round_s: float = 5.0,
                 epoch: Callable[[], Epoch | None] | None = None,
                 peer: tuple[str, str] | None = None, token: str | None = None) -> None:
        """``peer`` (peer id, environment) and ``token``: the credential the waits present
        (``ReplicaClient.peer_token``: ``token``, else the process's setting, else one made
        from the cluster secret if this process has it); without ``peer``, none."""
        self.settings = settings
        self._peer, self._token = peer, token
        self._tokens: dict[str, str | None] = {}
        self.timeout_ms = timeout_ms
        self.round_s = round_s
        self._epoch_fn = epoch
        self._config: ConfigLog | None = None
        self._config_lock = threading.Lock()
        self._client = ReplicaClient()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="peer-stability")
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, int], list[tuple[int, float, Done]]] = {}
        self._closed = threading.Event()

    def wait(self, level: str, partition: int, offset: int, done: Done) -> None:
        """Call ``done`` once txlog ``partition``/``offset`` holds at ``level``."""
        key = (level, partition)
        deadline = time.monotonic() + self.timeout_ms / 1000
        with self._lock:
            start = key not in self._waiters
            self._waiters.setdefault(key, []).append((offset, deadline, done))
        if start:
            threading.Thread(target=self._watch, args=key, daemon=True,
                             name=f"peer-{level}-{partition}").start()

    def _token_for(self, address: str) -> str | None:
        if self._peer is None:
            return self._token
        if address not in self._tokens:
            self._tokens[address] = self._client.peer_token(address, *self._peer, self._token)
        return self._tokens[address]

    def _epoch(self) -> Epoch:
        if self._epoch_fn is not None:
            epoch = self._epoch_fn()
        else:
            with self._config_lock:
                if self._config is None:
                    self._config = ConfigLog(self.settings)
                    epoch = self._config.read_to_end()
                else:
                    epoch = self._config.poll()
        if epoch is None:
            raise DurabilityUnavailableError(
                f"durability quorum/all needs replica nodes, and topic"
                f" {self.settings.topic('config')} holds no cluster config")
        return epoch

    def _watch(self, level: str, partition: int) -> None:
        key, backoff, last = (level, partition), 0.05, ""
        while not self._closed.is_set():
            now = time.monotonic()
            with self._lock:
                waiters = self._waiters.get(key, [])
                expired = [w for w in waiters if w[1] <= now]
                live = [w for w in waiters if w[1] > now]
                if not live:
                    self._waiters.pop(key, None)
                else:
                    self._waiters[key] = live
            for offset, _, done in expired:
                done(DurabilityTimeoutError(
                    f"{level} not reached for txlog partition {partition} offset {offset}"
                    f" within {self.timeout_ms / 1000:g} s" + (f": {last}" if last else "")))
            if not live:
                return
            # the oldest pending Send: the call returns as soon as the cut covers it, and its
            # answer (the end the level holds to) settles every Send below that end at once.
            # Asking for the newest made the oldest wait for the newest's whole way through
            # the replicas (up to twice the pipeline's latency).
            target = min(w[0] for w in live)
            budget = min(self.round_s, max(0.05, min(w[1] for w in live) - now))
            started = time.monotonic()
            try:
                _, end = wait_replicated(self._client, self._epoch(), partition, target,
                                         level, budget, self._pool, self._token_for)
            except ReplicaTimeout as exc:
                last = str(exc)
                if time.monotonic() - started < budget / 2:  # nodes unreachable: back off
                    self._closed.wait(backoff)
                    backoff = min(1.0, backoff * 2)
                continue
            except Exception as exc:  # noqa: BLE001 - no config, bad cluster: fail these
                error = exc if isinstance(exc, DurabilityUnavailableError) else \
                    DurabilityUnavailableError(f"{level} for txlog partition {partition}: {exc}")
                self._fail(key, error)
                continue
            backoff = 0.05
            with self._lock:
                waiters = self._waiters.get(key, [])
                # the answer covers everything below `end`, including sends that
                # arrived while the call was out
                reached = [w for w in waiters if w[0] < end]
                self._waiters[key] = [w for w in waiters if w[0] >= end]
            for _, _, done in reached:
                done(None)

    def _fail(self, key: tuple[str, int], error: BaseException) -> None:
        with self._lock:
            waiters = self._waiters.pop(key, [])
            self._waiters[key] = []
        for _, _, done in waiters:
            done(error)

    def pending(self) -> int:
        """Sends waiting for replicas."""
        with self._lock:
            return sum(len(w) for w in self._waiters.values())

    def close(self) -> None:
        """Stop waiting (pending sends fail as unavailable)."""
        self._closed.set()
        with self._lock:
            keys = list(self._waiters)
        for key in keys:
            self._fail(key, DurabilityUnavailableError("the peer is stopping"))
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
        if self._config is not None:
            self._config.close()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<ReplicaStability pending={self.pending()}>"


