"""Physical expiry of remembered ids, pure logic: which FIFO chunks to read, which entries to
delete, and the peer's meta afterwards (see :mod:`tidemark.log.queue_state` for the
model: a memory expires once the peer's log clock reaches its ``until``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tidemark.log.queue_state import (
    DEDUP,
    EARLY,
    GC_CHUNKS,
    Chunk,
    Entry,
    Fifo,
    PeerMeta,
)

__all__ = ["ExpiryPlan", "expiry_chunks", "expiry_reads", "plan_expiry"]


@dataclass
class ExpiryPlan:
    """What expiry removes: entries, chunks, and the meta afterwards."""

    deletes: list[str]
    chunk_deletes: list[tuple[int, int]]
    meta: PeerMeta


def _read_range(meta: PeerMeta, cls: int) -> range:
    """Sequence numbers of FIFO ``cls`` to read for expiry (empty unless its head is due)."""
    fifo = meta.fifos[cls]
    if fifo.empty or fifo.head_until > meta.clock:
        return range(0)
    return range(fifo.head, min(fifo.tail, fifo.head + GC_CHUNKS))


def expiry_chunks(meta: PeerMeta) -> list[tuple[int, int]]:
    """``(class, seq)`` of the chunks to read for expiry: up to :data:`GC_CHUNKS` from the
    head of each FIFO whose head chunk is due (or of unknown expiry)."""
    return [(cls, seq) for cls in (DEDUP, EARLY) for seq in _read_range(meta, cls)]


def _due(meta: PeerMeta, chunks: Mapping[tuple[int, int], Chunk | None]
         ) -> list[tuple[int, int, Chunk | None]]:
    """The leading run of due chunks of each FIFO, in order (a missing chunk counts as due)."""
    out = []
    for cls in (DEDUP, EARLY):
        for seq in _read_range(meta, cls):
            chunk = chunks.get((cls, seq))
            if chunk is not None and chunk.until > meta.clock:
                break
            out.append((cls, seq, chunk))
    return out


def expiry_reads(meta: PeerMeta, chunks: Mapping[tuple[int, int], Chunk | None]) -> list[str]:
    """Message ids whose entries :func:`plan_expiry` needs (the ids of due chunks)."""
    return sorted({m for _, _, chunk in _due(meta, chunks) if chunk for m in chunk.ids})


def plan_expiry(meta: PeerMeta, chunks: Mapping[tuple[int, int], Chunk | None],
                entries: Mapping[str, Entry | None]) -> ExpiryPlan:
    """Pop the due chunks: delete their ids' entries that are still remembered and expired.

    ``chunks`` are the chunks of :func:`expiry_chunks` as read, ``entries`` the current entries
    of :func:`expiry_reads` (after this batch's writes).
    """
    due = _due(meta, chunks)
    deletes: set[str] = set()
    heads = [f.head for f in meta.fifos]
    for cls, seq, chunk in due:
        for mid in chunk.ids if chunk else ():
            entry = entries.get(mid)
            if entry is not None and not entry.queued and entry.until <= meta.clock:
                deletes.add(mid)
        heads[cls] = seq + 1
    fifos = list(meta.fifos)
    for cls, fifo in enumerate(meta.fifos):
        if not _read_range(meta, cls):
            continue
        if heads[cls] >= fifo.tail:
            fifos[cls] = Fifo(fifo.tail, fifo.tail, 0)
        else:  # the next chunk's expiry if it was read (it was not due), else unknown
            nxt = chunks.get((cls, heads[cls]))
            fifos[cls] = Fifo(heads[cls], fifo.tail, nxt.until if nxt else 0)
    return ExpiryPlan(sorted(deletes), [(c, s) for c, s, _ in due],
                      replace(meta, fifos=(fifos[0], fifos[1])))
