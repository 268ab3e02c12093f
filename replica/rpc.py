"""The gRPC surface of a replica node: every method of ``tidemark.Replica`` it serves, and the
collaborator that answers it. The wire (service, signing, peer tokens, record packing) is
:mod:`tidemark.gossip.service`'s; the methods' bodies are in docs/replica.md.

============  ===========================================================
``Gossip``    :meth:`tidemark.replica.gossiper.Gossiper.exchange`
``Status``    :meth:`ReplicaServicer.status` (:mod:`tidemark.replica.status`)
``Digest``    :func:`tidemark.replica.backfill.serve_digest`
``Fetch``     :func:`tidemark.replica.backfill.serve_fetch`
``Pin``       :meth:`ReplicaServicer.pin` (:class:`tidemark.replica.leases.Leases`)
``RenewPin``  :meth:`ReplicaServicer.renew_pin`
``Unpin``     :meth:`ReplicaServicer.unpin`
``WaitApplied``, ``WaitStable``, ``Watch`` (stream)
              :class:`tidemark.replica.ends.Ends`
``Replay``    (stream) :meth:`tidemark.replica.replay.ReplayService.handle`
============  ===========================================================
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import grpc

from tidemark.gossip.service import StreamHandler, start_server
from tidemark.gossip.tls import Transport
from tidemark.replica.backfill import serve_digest, serve_fetch
from tidemark.replica.cut import CutKeeper
from tidemark.replica.ends import Ends
from tidemark.replica.gossiper import Gossiper
from tidemark.replica.leases import Leases
from tidemark.replica.replay import ReplayService
from tidemark.replica.status import StatusSnapshot, build_status
from tidemark.replica.store import Store
from tidemark.replica.view import ClusterView

__all__ = ["ReplicaServicer"]


class ReplicaServicer:
    """The node's ``tidemark.Replica`` methods, each delegating to one collaborator."""

    def __init__(self, view: ClusterView, cut: CutKeeper, store: Store, pins: Leases,
                 gossiper: Gossiper, ends: Ends, replay: ReplayService) -> None:
        self.view, self.cut, self.store, self.pins = view, cut, store, pins
        self.gossiper, self.ends, self.replay = gossiper, ends, replay

    def handlers(self) -> dict[str, Callable[[bytes], bytes]]:
        """The unary methods: name -> bytes handler."""
        return {"Gossip": self.gossiper.exchange, "Status": self.status,
                "Digest": partial(serve_digest, self.store),
                "Fetch": partial(serve_fetch, self.store),
                "Pin": self.pin, "Unpin": self.unpin, "RenewPin": self.renew_pin,
                "WaitApplied": self.ends.wait_applied, "WaitStable": self.ends.wait_stable}

    def streams(self) -> dict[str, StreamHandler]:
        """The bidirectional-stream methods."""
        return {"Replay": self.replay.handle, "Watch": self.ends.watch}

    def serve(self, address: str, secret: str | None, environment: str,
              transport: Transport | None = None, health: Any | None = None) -> grpc.Server:
        """Serve every method on ``address`` (and ``health``, the standard health service).
        Over mutual TLS (``transport``) the caller's
        certificate decides who may call what (:func:`tidemark.gossip.access.admit`);
        insecure, with ``secret``: gossip, status and backfill for cluster members only,
        replay, pins and waits for peer tokens of ``environment``."""
        return start_server(address, self.handlers(), workers=64, streams=self.streams(),
                            secret=secret, environment=environment, transport=transport,
                            health=health)

    def status(self, body: bytes) -> bytes:
        """The ``replica status --json`` document."""
        doc = build_status(self.snapshot())
        doc["deadletter_ledger"] = self.store.dead_letters(limit=100)  # this node's own
        ingest = self.ends.ingest  # this node's counts since it started
        doc["ingest_counts"] = {"poison": ingest.poison, **{
            f"refused_{kind}": n for kind, n in sorted(ingest.refused.items())}}
        doc["ust_epoch"] = self.cut.ust_epoch
        return json.dumps(doc).encode()

    def snapshot(self) -> StatusSnapshot:
        """What the node knows now, for the status document."""
        view, cut = self.view, self.cut
        now = time.monotonic()
        with view.lock:
            return StatusSnapshot(
                view.node_id, view.epoch, dict(view.states),
                {n: now - t for n, t in view.last_seen.items()}, view.down_after_s,
                dict(cut.ust), cut.ust_ms, dict(cut.gc_point), dict(cut.log_end),
                dict(cut.held) if cut.held else None, self.replay.pin_rows())

    def pin(self, body: bytes) -> bytes:
        """``{barrier: {tp: offset}, lease_ms?, owner?}`` -> ``{pin, barrier, lease_ms,
        expires_ms}``: a lease (:mod:`tidemark.replica.leases`) holding the GC point at
        ``barrier`` (raised to the current GC point) until unpinned or not renewed for
        ``lease_ms``."""
        req = json.loads(body)
        with self.view.lock:
            gc_point = dict(self.cut.gc_point)
        lease = self.pins.grant(req["barrier"], gc_point, req.get("lease_ms"),
                                str(req.get("owner", "")))
        return json.dumps({"pin": lease.pin, "barrier": lease.barrier,
                           "lease_ms": lease.lease_ms, "expires_ms": lease.expires_ms}).encode()

    def renew_pin(self, body: bytes) -> bytes:
        """``{pin, lease_ms?}`` -> ``{renewed, expires_ms}``."""
        req = json.loads(body)
        lease = self.pins.renew(req["pin"], req.get("lease_ms"))
        return json.dumps({"renewed": lease is not None,
                           "expires_ms": lease.expires_ms if lease else None}).encode()

    def unpin(self, body: bytes) -> bytes:
        """``{pin}`` -> ``{released}``."""
        return json.dumps({"released": self.pins.release(json.loads(body)["pin"])}).encode()
