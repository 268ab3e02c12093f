"""Backfill: fill a gap of the interval map from a peer replica that holds the range.

Gaps are filled chunk by chunk. For each chunk the node first compares digests with the
peer (the OpenSplice equality check) and copies nothing when they match; otherwise it
fetches the records and applies them — records, indexes and the map — in one write batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping

from gossip.interval_map import IntervalMap
from gossip.missing import find_source
from gossip.service import ReplicaClient, unpack_records
from replica.ingest import index_txlog
from replica.store import Store

__all__ = ["Backfiller"]

log = logging.getLogger(__name__)


class Backfiller:
    """Fills txlog gaps of one node from its peers, a bounded amount per call."""

    def __init__(self, store: Store, peers: ReplicaClient, chunk: int = 5000) -> None:
        self.store = store
        self.peers = peers
        self.chunk = chunk
        self.copied = 0
        self.skipped = 0
        self.status = ""
        self._announced: set[tuple[int, int]] = set()

    def step(self, partition: int, maps: Mapping[str, IntervalMap],
             addresses: Mapping[str, str], budget_s: float = 0.5,
             on_copied: Callable[[int], None] = lambda n: None) -> bool:
        """Work on the gaps of txlog ``partition`` for up to ``budget_s``; True if any gap
        had a source."""
        deadline = time.monotonic() + budget_s
        worked = False
        for start, end in self.store.map("txlog", partition).gaps():
            total = end - start
            while start < end and time.monotonic() < deadline:
                src = find_source(start, end, {n: m for n, m in maps.items() if n in addresses})
                if src is None:
                    break
                node, reach = src
                stop = min(reach, start + self.chunk)
                if (partition, end) not in self._announced:
                    self._announced.add((partition, end))
                    log.warning("backfilling txlog/%d [%d, %d) from %s", partition, start, end,
                                node)
                self._copy(partition, start, stop, node, addresses[node], on_copied)
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
              on_copied: Callable[[int], None]) -> None:
        body = {"partition": partition, "start": start, "end": stop}
        theirs = self.peers.call_json(address, "Digest", body, timeout=10)
        mine, count = self.store.digest(partition, start, stop)
        batch = self.store.batch()
        if theirs["digest"] == str(mine) and theirs["count"] == count:
            self.skipped += stop - start
        else:
            records = unpack_records(self.peers.call(address, "Fetch", json.dumps(body).encode(),
                                                     timeout=30))
            for off, value in records:
                index_txlog(batch, partition, off, value)
            self.copied += len(records)
            on_copied(len(records))
        batch.map("txlog", partition).insert(start, stop)
        batch.commit()
