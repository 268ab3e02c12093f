"""Adopting a copy of another node's store folder: the records stay, the claims go.

An operator seeds a replica from a copy of a peer's store folder (taken while that peer was
stopped) by creating the file :data:`ADOPT_FILE` in it; the node opening it adopts it. The
copy's interval maps are another node's word, so this node claims nothing of them: every
copied range becomes a gap that backfill verifies against a peer by digest before claiming
it (equal ranges are claimed without copying; others are replaced by the peer's records).
"""

from __future__ import annotations

import plyvel

from tidemark.gossip.interval_map import IntervalMap
from tidemark.replica.digests import rebuild_digests
from tidemark.replica.keys import CUT_KEY, NEW_KEY, POSITION, TOPIC_CODES

__all__ = ["ADOPT_FILE", "FORMAT", "adopt_copy"]

#: A file an operator creates in a copied store folder to let another node adopt it.
ADOPT_FILE = "ADOPT"
#: The store format: 2 has digests per backfill range (``H`` keys).
FORMAT = b"2"


def adopt_copy(db: plyvel.DB, node_id: str) -> None:
    """Make a copy of another node's store this node's: the records stay, the claims go.
    txlog maps become empty up to the copied position (a zero-length range marks where
    ingest resumes), so every copied range is a gap that backfill verifies against a peer
    by digest before claiming it; digests are recomputed from the records; the copy's cut,
    pins, loss ledger and queue state (rebuilt from Kafka) are dropped; the store is "new"
    until this node's rejoin is committed."""
    wb = db.write_batch(sync=True)
    for prefix in (b"M", b"P", b"Q", b"I", b"R", b"Y", b"L"):
        for key in db.iterator(prefix=prefix, include_value=False):
            wb.delete(key)
    for key, value in db.iterator(prefix=b"P" + TOPIC_CODES["txlog"]):
        pos, _ = POSITION.unpack(value)
        wb.put(key, POSITION.pack(pos, 0))
        wb.put(b"M" + key[1:], IntervalMap(0, 0, [[pos, pos]]).to_bytes())
    wb.delete(CUT_KEY)
    wb.put(b"Xnode", node_id.encode())
    wb.put(NEW_KEY, b"1")
    wb.write()
    rebuild_digests(db)
    db.put(b"Xformat", FORMAT, sync=True)
