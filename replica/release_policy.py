"""GC with the release policy: below the GC point a record is dropped only when every rule
allows it — acked (Ack applied below the GC point) or purged (a Purge of its peer between it
and the GC point), older than ``min_age_ms``, and the size rule (keep at least
``retain_bytes`` of records per partition) allows it. Deletions are written in batches of
:data:`CHUNK`; the interval map floor is raised with the last one (a crash in between leaves
released records below a lower floor, which the next pass simply passes over).
"""

from __future__ import annotations

from log.codec import default_codec
from log.exceptions import CodecError
from replica.config import ReleasePolicy
from replica.store import Store, ack_key, data_key

__all__ = ["release"]

CHUNK = 10_000  # deletions per write batch; the floor is raised with the last one


def release(store: Store, partition: int, point: int, policy: ReleasePolicy,
            now_ms: int) -> int:
    """Drop what the policy allows in txlog ``partition`` below ``point``; returns the
    number of records released."""
    m = store.map("txlog", partition)
    point = min(point, m.base_end)
    if point <= 0:
        return 0
    if policy.retain_bytes and store.db.approximate_size(
            data_key(partition, 0), data_key(partition, 1 << 62)) <= policy.retain_bytes:
        return 0
    decode = default_codec().decode
    old_enough = now_ms - policy.min_age_ms
    batch = store.batch()
    released = pending = 0
    for off, value in store.records(partition, 0, point):
        if pending >= CHUNK:  # bounded batches: memory must not grow with the backlog
            batch.commit()
            batch, pending = store.batch(), 0
        try:
            dec = decode(value)
        except CodecError:
            continue
        rec = dec.record
        if rec["timestamp_ms"] > old_enough:
            continue
        if dec.name == "Send":
            peer, msg_id = rec["recipient"], rec["message_id"]
            acked = store.ack_offset(partition, peer, msg_id)
            if acked is not None and acked < point:
                batch.delete(ack_key(partition, peer, msg_id))
            elif not store.purged_between(partition, peer, off, point):
                continue
        batch.delete(data_key(partition, off))
        released += 1
        pending += 1
    batch.map("txlog", partition).compact_below(point)
    batch.commit()
    return released
