"""A replica node's gRPC handlers other than ``Gossip``: status, backfill (``Digest``,
``Fetch``), GC pins and the waits of peers (``WaitApplied``, ``WaitStable``, and their
stream ``Watch``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from tidemark.gossip.exceptions import ReplayRefusedError
from tidemark.replica.backfill import serve_digest, serve_fetch
from tidemark.replica.exceptions import ReplicaError
from tidemark.replica.leases import Leases
from tidemark.replica.node_parts import NodeParts
from tidemark.replica.replay import ReplayService
from tidemark.replica.status import StatusSnapshot, build_status

__all__ = ["NodeRpc"]


class NodeRpc(NodeParts):
    """Mixin of :class:`tidemark.replica.node.Node`: its RPC handlers."""

    progress: threading.Condition
    stopping: threading.Event
    pins: Leases
    replay: ReplayService
    ust: dict[str, int]
    ust_ms: int
    ust_epoch: int
    gc_point: dict[str, int]
    log_end: dict[str, int]
    held: dict[str, Any] | None

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
        by ``max_bytes`` when asked (:func:`tidemark.replica.backfill.serve_digest`)."""
        return serve_digest(self.store, body)

    def _end(self, k: int) -> tuple[int, int]:
        """(applied end, stable end) of txlog partition ``k`` on this node."""
        return self.store.map("txlog", k).base_end, self.ust.get(f"txlog/{k}", 0)

    def _ends(self, partitions: list[int]) -> dict[str, list[int]]:
        """``{partition: [applied end, stable end]}`` of txlog ``partitions``."""
        return {str(k): list(self._end(k)) for k in partitions}

    def _wait(self, body: bytes, which: int) -> bytes:
        """Block until end ``which`` (0 applied, 1 stable) of the request's partition passes
        its offset, or the request's deadline."""
        req = json.loads(body)
        k, offset = int(req["partition"]), int(req["offset"])
        if k not in self.ingest.partitions:
            raise ReplicaError(f"{self.node_id} does not own txlog/{k}")
        deadline = time.monotonic() + min(float(req.get("timeout_ms", 5000)), 60_000) / 1000
        with self.progress:
            while self._end(k)[which] <= offset and not self.stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.progress.wait(min(left, 0.5))
        applied, stable = self._end(k)
        return json.dumps({"reached": (applied, stable)[which] > offset, "node": self.node_id,
                           "applied_end": applied, "stable_end": stable}).encode()

    def rpc_wait_applied(self, body: bytes) -> bytes:
        """``{partition, offset, timeout_ms}`` -> ``{reached, ...}`` once this node applied
        txlog offset ``offset`` (its contiguous base covers it) or the timeout passed."""
        return self._wait(body, 0)

    def rpc_wait_stable(self, body: bytes) -> bytes:
        """Like ``WaitApplied``, until the universal stable cut covers the offset."""
        return self._wait(body, 1)

    def rpc_watch(self, requests: Iterator[bytes],
                  context: grpc.ServicerContext) -> Iterator[bytes]:
        """The stream behind peers' durability waits (``quorum``/``all``): one request
        ``{partitions?}`` (default: every txlog partition this node owns), then one message
        ``{"ends": {partition: [applied end, stable end]}, "node"}`` at once and again each
        time an end moves (only the partitions that moved), until the caller goes away.
        A partition this node does not own is listed once under ``"unowned"``. One stream
        replaces a unary wait per partition and answer: the node wakes it when records
        apply or the cut moves, and sends what changed."""
        try:
            req = json.loads(next(requests, b"{}") or b"{}")
            asked = [int(k) for k in req.get("partitions", self.ingest.partitions)]
        except (ValueError, TypeError, AttributeError) as exc:
            raise ReplayRefusedError(f"malformed Watch request: {exc}") from None
        owned = set(self.ingest.partitions)
        partitions = [k for k in asked if k in owned]
        sent: dict[str, list[int]] = {}
        first: dict[str, Any] = {"node": self.node_id,
                                 "unowned": [k for k in asked if k not in owned]}
        while not self.stopping.is_set() and context.is_active():
            with self.progress:
                ends = self._ends(partitions)
                if ends == sent:
                    self.progress.wait(0.5)
                    ends = self._ends(partitions)
            moved = {k: v for k, v in ends.items() if sent.get(k) != v}
            if moved or first:
                sent = ends
                yield json.dumps({**first, "ends": moved}).encode()
                first = {}

    def rpc_fetch(self, body: bytes) -> bytes:
        """Stored records of a range (:func:`~tidemark.replica.backfill.serve_fetch`)."""
        return serve_fetch(self.store, body)

    def rpc_pin(self, body: bytes) -> bytes:
        """``{barrier: {tp: offset}, lease_ms?, owner?}`` -> ``{pin, barrier, lease_ms,
        expires_ms}``: a lease (:mod:`tidemark.replica.leases`) holding the GC point at ``barrier``
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
