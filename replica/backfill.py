"""Backfill: fill a gap of the interval map from a peer replica that holds the range.

Gaps are filled chunk by chunk. Chunks are aligned to the store's backfill ranges
(:data:`tidemark.replica.digests.RANGE` offsets) and hold at most ``max_bytes`` of record values
(the peer's ``Digest`` stops early at that bound and says where: ``end``), so a ``Fetch`` stays well
below gRPC's 64 MiB message cap whatever the record size. For each chunk the node compares the
peer's digest with the digest of the records it holds itself in the chunk (both read from the
digests stored per range; the OpenSplice equality check): equal, it claims the chunk without copying
(records a node holds but does not claim come from an adopted copy of a store, see
:func:`tidemark.replica.store.adopt_copy`); otherwise it fetches the peer's records and replaces its
own in the chunk — records, indexes, digests and the map in one write batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping

from tidemark.gossip.interval_map import IntervalMap
from tidemark.gossip.missing import find_source
from tidemark.gossip.service import MAX_MESSAGE_BYTES, ReplicaClient, pack_records, unpack_records
from tidemark.gossip.txlog_admission import TxlogAdmission
from tidemark.replica.digests import RANGE
from tidemark.replica.ingest import index_txlog
from tidemark.replica.store import Store

__all__ = ["Backfiller", "serve_digest", "serve_fetch", "CHUNK_BYTES"]

log = logging.getLogger(__name__)
CHUNK_BYTES = 16 << 20  # record bytes per chunk; a quarter of the gRPC message cap


def serve_digest(store: Store, body: bytes) -> bytes:
    """The ``Digest`` handler: ``{partition, start, end[, max_bytes]}`` -> ``{digest, count,
    end}`` over the stored records of ``[start, end)``; with ``max_bytes`` it stops before
    the record that would pass that many value bytes (always taking at least one) and
    ``end`` is where it stopped."""
    req = json.loads(body)
    limit = req.get("max_bytes")
    digest, count, end = store.digest_upto(req["partition"], req["start"], req["end"],
                                           int(limit) if limit else None)
    return json.dumps({"digest": str(digest), "count": count, "end": end}).encode()


def serve_fetch(store: Store, body: bytes) -> bytes:
    """The ``Fetch`` handler: the stored records of ``[start, end)``. It never truncates a
    range (the caller marks it applied): a reply over the gRPC cap is refused instead."""
    req = json.loads(body)
    out = pack_records(store.records(req["partition"], req["start"], req["end"]))
    if len(out) > MAX_MESSAGE_BYTES:
        raise ValueError(f"Fetch of [{req['start']}, {req['end']}) is {len(out)} bytes, over "
                         f"the {MAX_MESSAGE_BYTES}-byte message cap: ask Digest with max_bytes")
    return out


class Backfiller:
    """Fills txlog gaps of one node from its peers, a bounded amount per call."""

    def __init__(self, store: Store, peers: ReplicaClient, chunk: int = RANGE,
                 max_bytes: int = CHUNK_BYTES, admission: TxlogAdmission | None = None) -> None:
        self.store = store
        #: what a copied record must pass, as ingest's: a refused copy is not stored
        self.admission = admission
        self.peers = peers
        self.chunk = chunk
        self.max_bytes = max_bytes
        self.copied = 0
        self.skipped = 0
        self.status = ""
        self._announced: set[tuple[int, int]] = set()

    def step(self, partition: int, maps: Mapping[str, IntervalMap],
             addresses: Mapping[str, str], budget_s: float = 0.5,
             on_copied: Callable[[int], None] = lambda n: None,
             on_skipped: Callable[[int], None] = lambda n: None) -> bool:
        """Work on the gaps of txlog ``partition`` for up to ``budget_s``; True if any gap
        had a source. ``on_copied`` gets the records copied, ``on_skipped`` the offsets
        claimed by digest without copying."""
        deadline = time.monotonic() + budget_s
        worked = False
        for start, end in self.store.map("txlog", partition).gaps():
            total = end - start
            while start < end and time.monotonic() < deadline:
                src = find_source(start, end, {n: m for n, m in maps.items() if n in addresses})
                if src is None:
                    break
                node, reach = src
                stop = min(reach, (start // self.chunk + 1) * self.chunk)  # aligned
                if (partition, end) not in self._announced:
                    self._announced.add((partition, end))
                    log.warning("backfilling txlog/%d [%d, %d) from %s", partition, start, end,
                                node)
                stop = self._copy(partition, start, stop, node, addresses[node], on_copied,
                                  on_skipped)
                worked = True
                done = total - (end - stop)
                self.status = f"txlog/{partition} [{start},{end}) from {node}: {done}/{total}"
                log.info("backfill %s", self.status)
                start = stop
            if start >= end and (partition, end) in self._announced:
                self._announced.discard((partition, end))
                log.warning("backfilled txlog/%d up to %d (%d records copied, %d offsets "
                            "skipped by digest so far)", partition, end, self.copied, self.skipped)
        if not self.store.map("txlog", partition).gaps():
            self.status = ""
        return worked

    def _copy(self, partition: int, start: int, stop: int, node: str, address: str,
              on_copied: Callable[[int], None], on_skipped: Callable[[int], None]) -> int:
        """Copy (or skip by digest) ``[start, x)`` for the ``x <= stop`` the byte bound
        allows; returns ``x``."""
        body = {"partition": partition, "start": start, "end": stop, "max_bytes": self.max_bytes}
        theirs = self.peers.call_json(address, "Digest", body, timeout=10)
        end = int(theirs.get("end", stop))  # a peer without the bound answers the whole range
        if start < end < stop:
            stop = end
            body["end"] = stop
        mine, count = self.store.digest(partition, start, stop)
        batch = self.store.batch()
        if theirs["digest"] == str(mine) and theirs["count"] == count:
            self.skipped += stop - start
            on_skipped(stop - start)
        else:
            records = unpack_records(self.peers.call(address, "Fetch", json.dumps(body).encode(),
                                                     timeout=30))
            for off, _ in self.store.records(partition, start, stop):
                batch.delete_record(partition, off)  # replaced by the peer's copy
            for off, value in records:
                index_txlog(batch, partition, off, value, admission=self.admission)
            self.copied += len(records)
            on_copied(len(records))
        batch.map("txlog", partition).insert(start, stop)
        batch.commit()
        return stop
