"""Durability ``quorum`` and ``all``, answered by the replica nodes: the peer holds one
``Watch`` stream per replica node it waits on, and each node sends the applied and stable
ends of its txlog partitions whenever they move. The bookkeeping (which waits a report
settles) is :class:`tidemark.peer_client.confirmations.Confirmations`; this module does the I/O.
The peer never polls: a send completes on the first report that covers it."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

import grpc

from tidemark.gossip.cluster_config import ConfigLog, Epoch
from tidemark.gossip.service import ReplicaClient
from tidemark.gossip.tls import Transport
from tidemark.log.settings import Settings
from tidemark.peer_client.confirmations import Confirmations
from tidemark.peer_client.exceptions import DurabilityTimeoutError, DurabilityUnavailableError

__all__ = ["ReplicaStability"]

log = logging.getLogger("peer_client.stability")
Done = Callable[[BaseException | None], None]
_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class ReplicaStability:
    """A :class:`~tidemark.peer_client.ports.StabilityPort` over the replica cluster of
    ``settings``.

    One thread follows each node's ``Watch`` stream (reconnecting with a backoff when the
    node goes away); one housekeeping thread fails the waits past their deadline, follows
    the cluster config (owners and addresses) and closes the streams after ``idle_s``
    without a wait."""

    def __init__(self, settings: Settings, timeout_ms: int, round_s: float = 5.0,
                 epoch: Callable[[], Epoch | None] | None = None,
                 peer: tuple[str, str] | None = None, token: str | None = None,
                 idle_s: float = 30.0, transport: Transport | None = None) -> None:
        """``peer`` (peer id, environment) and ``token``: the credential the streams present
        (``ReplicaClient.peer_token``: ``token``, else the process's setting, else one made
        from the cluster secret if this process has it); without ``peer``, ``token``.
        ``round_s`` is how often the cluster config is re-read while waits are pending."""
        self.settings = settings
        self._peer, self._token = peer, token
        self._tokens: dict[str, str | None] = {}
        self.timeout_ms = timeout_ms
        self.round_s = round_s
        self.idle_s = idle_s
        self._epoch_fn = epoch
        self._config: ConfigLog | None = None
        self._client = ReplicaClient(transport=transport)
        # entered as the plain lock (C), not through the condition's Python-level methods:
        # every send at durability quorum/all takes it once
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._book = Confirmations()
        self._owners: dict[int, list[str]] = {}
        self._addresses: dict[str, str] = {}
        self._calls: dict[str, object] = {}      # node -> its open stream (to cancel)
        self._followed: set[str] = set()        # nodes with a follower thread
        self._errors: dict[str, str] = {}        # node -> why its stream failed last
        self._unavailable: str | None = None     # why the cluster config could not be read
        self._closed = threading.Event()
        self._stopping = False                   # _closed, read by wait() under the lock
        self._house: threading.Thread | None = None
        self._epoch_read = 0.0
        self._last_wait = time.monotonic()

    # ---- the port --------------------------------------------------------------------------
    def wait(self, level: str, partition: int, offset: int, done: Done) -> None:
        """Call ``done`` once txlog ``partition``/``offset`` holds at ``level``."""
        now = time.monotonic()
        deadline = now + self.timeout_ms / 1000
        with self._lock:
            if self._stopping:
                ready: list[Done] = []
                error: BaseException | None = DurabilityUnavailableError("the peer is stopping")
            else:
                error = None
                self._last_wait = now
                owners = self._owners.get(partition)
                if owners and self._book.wait(level, partition, offset, deadline, done, owners):
                    ready = [done]  # the reports so far hold it already
                else:
                    if not owners:  # settled once the cluster config names the owners
                        self._book.add(level, partition, offset, deadline, done)
                    ready = []
                if owners is None or not self._followed.issuperset(owners):
                    self._cond.notify_all()  # the housekeeping thread reads the config
                if self._house is None:
                    self._house = threading.Thread(target=self._housekeeping, daemon=True,
                                                   name="peer-stability")
                    self._house.start()
        if error is not None:
            done(error)
        for callback in ready:
            callback(None)

    def pending(self) -> int:
        """Sends waiting for replicas."""
        with self._lock:
            return len(self._book)

    def close(self) -> None:
        """Stop waiting (pending sends fail as unavailable)."""
        with self._lock:
            self._closed.set()
            self._stopping = True
            taken = self._book.take()
            calls = list(self._calls.values())
            self._cond.notify_all()
        for call in calls:
            call.cancel()  # type: ignore[attr-defined]
        for _, _, w in taken:
            w.done(DurabilityUnavailableError("the peer is stopping"))
        self._client.close()
        if self._config is not None:
            self._config.close()

    # ---- cluster config --------------------------------------------------------------------
    def _epoch(self) -> Epoch:
        if self._epoch_fn is not None:
            epoch = self._epoch_fn()
        elif self._config is None:
            self._config = ConfigLog(self.settings)
            epoch = self._config.read_to_end()
        else:
            epoch = self._config.poll()
        if epoch is None:
            raise DurabilityUnavailableError(
                f"durability quorum/all needs replica nodes, and topic"
                f" {self.settings.topic('config')} holds no cluster config")
        return epoch

    def _follow_config(self) -> None:
        """Read the cluster config; start a follower for every owner of a waited partition."""
        try:
            epoch = self._epoch()
        except DurabilityUnavailableError as exc:
            self._fail_all(exc)
            return
        except Exception as exc:  # noqa: BLE001 - Kafka unreachable, bad config: retried
            with self._lock:
                self._unavailable = f"cluster config unreadable: {exc}"
            return
        owners = {int(tp.split("/")[1]): list(nodes) for tp, nodes in epoch.owners().items()
                  if tp.startswith("txlog/")}
        with self._lock:
            self._unavailable = None
            self._owners, self._addresses = owners, dict(epoch.nodes)
            orphans = self._book.take([k for k in self._book.partitions() if not owners.get(k)])
            for gone in [n for n in self._calls if n not in epoch.nodes]:
                self._calls[gone].cancel()  # type: ignore[attr-defined]
            wanted = {n for k in self._book.partitions() for n in owners.get(k, [])}
            start = [n for n in wanted if n not in self._followed]
            self._followed.update(start)
            ready = self._book.settle(self._book.partitions(), owners)
        for node in start:
            threading.Thread(target=self._follow, args=(node,), daemon=True,
                             name=f"peer-watch-{node}").start()
        for callback in ready:
            callback(None)
        for level, k, w in orphans:
            w.done(DurabilityUnavailableError(
                f"{level} for txlog partition {k}: no replica owns txlog/{k} in epoch"
                f" {epoch.epoch}"))

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            taken = self._book.take()
        for _, _, w in taken:
            w.done(error)

    # ---- threads ---------------------------------------------------------------------------
    def _housekeeping(self) -> None:
        """Deadlines, the cluster config, idle streams."""
        while not self._closed.is_set():
            now = time.monotonic()
            with self._lock:
                expired = self._book.expire(now)
                pending = len(self._book)
                unknown = any(k not in self._owners or
                              any(n not in self._followed for n in self._owners[k])
                              for k in self._book.partitions())
                idle = not pending and now - self._last_wait > self.idle_s
                calls = list(self._calls.values()) if idle and self._calls else []
            for level, k, w in expired:
                w.done(self._timeout_error(level, k, w.offset))
            if unknown or (pending and now - self._epoch_read >= self.round_s):
                self._epoch_read = now
                self._follow_config()
            for call in calls:  # nothing to wait for: let the nodes' stream threads go
                call.cancel()  # type: ignore[attr-defined]
            with self._lock:
                if not self._closed.is_set():
                    self._cond.wait(0.05 if pending else 0.5)

    def _follow(self, node: str) -> None:
        """Follow ``node``'s Watch stream until idle, closed or the node leaves the config."""
        backoff = 0.05
        while not self._closed.is_set():
            with self._lock:
                address = self._addresses.get(node)
                if address is None:
                    break
            call = None
            try:
                call = self._client.watch(address, token=self._token_for(address))
                with self._lock:
                    if self._closed.is_set():
                        call.cancel()
                        break
                    self._calls[node] = call
                for raw in call:
                    msg = json.loads(raw)
                    ends = {int(k): (int(v[0]), int(v[1]))
                            for k, v in msg.get("ends", {}).items()}
                    with self._lock:
                        self._book.report(node, ends)
                        self._errors.pop(node, None)
                        ready = self._book.settle(ends, self._owners)
                    for callback in ready:
                        callback(None)
                    backoff = 0.05
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED:
                    pass  # idle, closed, or the node left the config
                elif exc.code() in _REFUSED:
                    self._refused(node, exc)
                else:
                    with self._lock:
                        self._errors[node] = f"{node}: {exc.code().name}"
            except (ValueError, TypeError, KeyError, IndexError) as exc:
                log.warning("unusable Watch message from %s: %s", node, exc)
            with self._lock:
                if self._calls.get(node) is call:
                    self._calls.pop(node, None)
                if call is not None and call.code() == grpc.StatusCode.CANCELLED \
                        and not len(self._book):
                    break  # idle: the next wait starts a new follower
            self._closed.wait(backoff)
            backoff = min(1.0, backoff * 2)
        with self._lock:
            self._followed.discard(node)
            self._calls.pop(node, None)

    def _refused(self, node: str, exc: grpc.RpcError) -> None:
        """The node refused our credential: fail the waits of its partitions at once."""
        with self._lock:
            mine = [k for k, nodes in self._owners.items() if node in nodes]
            taken = self._book.take(mine)
            self._errors[node] = f"{node} refused the peer: {exc.details()}"
        for level, k, w in taken:
            w.done(DurabilityUnavailableError(
                f"{level} for txlog partition {k}: Watch on {node} refused: {exc.details()}"))

    def _token_for(self, address: str) -> str | None:
        if self._peer is None:
            return self._token
        if address not in self._tokens:
            self._tokens[address] = self._client.peer_token(address, *self._peer, self._token)
        return self._tokens[address]

    def _timeout_error(self, level: str, k: int, offset: int) -> DurabilityTimeoutError:
        with self._lock:
            owners = self._owners.get(k, [])
            confirmed = self._book.confirmed(level, k, offset, owners)
            errors = [self._errors[n] for n in owners if n in self._errors]
            unavailable = self._unavailable
        need = len(owners) // 2 + 1 if level == "quorum" else len(owners)
        why = "; ".join(errors + ([unavailable] if unavailable else []))
        return DurabilityTimeoutError(
            f"{level} not reached for txlog partition {k} offset {offset} within"
            f" {self.timeout_ms / 1000:g} s: {len(confirmed)} of {len(owners)} replicas"
            f" ({', '.join(owners) or 'none known'}) confirmed, {need} needed"
            + (f" ({why})" if why else ""))

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"<ReplicaStability pending={self.pending()}>"
