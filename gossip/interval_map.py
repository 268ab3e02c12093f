"""Interval maps: which offsets of one (topic, partition) a node has applied.

A map is a contiguous *base* ``[floor, base_end)`` plus sorted, disjoint *detached* ranges
above it (each separated from the base and from each other by a gap). ``floor`` is where the
node's retained data starts: offsets below it were released by GC (they still count as
applied). Gaps appear when the Kafka log start passed a node while it was down, or when a
node joins after retention; backfill or a missing-data splice closes them. Every range can
carry a 64-bit digest (XOR of per-record hashes), which merges by XOR when ranges merge.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IntervalMap", "record_hash"]

_MASK = (1 << 64) - 1


def record_hash(offset: int, value: bytes | None) -> int:
    """A 64-bit hash of one record at one offset (order-independent when XORed)."""
    data = value or b""
    lo = zlib.crc32(data, offset & 0xFFFFFFFF)
    hi = zlib.adler32(data, (offset >> 32) + 1)
    return ((hi << 32) | lo) ^ ((offset * 0x9E3779B97F4A7C15) & _MASK)


@dataclass
class IntervalMap:
    """Applied offsets of one (topic, partition) as base plus detached ranges."""

    base_end: int = 0
    floor: int = 0
    detached: list[list[int]] = field(default_factory=list)  # [start, end) sorted, disjoint

    # ---- queries ---------------------------------------------------------------------------
    def contains(self, offset: int) -> bool:
        """Whether ``offset`` was applied (released offsets below the floor count)."""
        if offset < 0:
            return False
        if offset < self.base_end:
            return True
        for a, b in self.detached:
            if a <= offset < b:
                return True
            if a > offset:
                break
        return False

    @property
    def end(self) -> int:
        """One past the highest applied offset (the ingest position)."""
        return self.detached[-1][1] if self.detached else self.base_end

    def gaps(self, upto: int | None = None) -> list[tuple[int, int]]:
        """Missing ranges ``[a, b)`` in ``[0, upto)`` (default: up to :attr:`end`)."""
        limit = self.end if upto is None else upto
        out: list[tuple[int, int]] = []
        cursor = self.base_end
        for a, b in self.detached:
            if cursor >= limit:
                break
            if a > cursor:
                out.append((cursor, min(a, limit)))
            cursor = max(cursor, b)
        if cursor < limit:
            out.append((cursor, limit))
        return out

    def ranges(self) -> Iterator[tuple[int, int]]:
        """Every applied range, base first (the base may be empty)."""
        yield (0, self.base_end)
        yield from ((a, b) for a, b in self.detached)

    # ---- updates ---------------------------------------------------------------------------
    def insert(self, start: int, end: int) -> None:
        """Mark ``[start, end)`` applied."""
        if end <= start:
            return
        if start <= self.base_end:
            if end > self.base_end:
                self.base_end = end
                self._absorb()
            return
        merged: list[list[int]] = []
        placed = False
        for a, b in self.detached:
            if b < start:
                merged.append([a, b])
            elif a > end:
                if not placed:
                    merged.append([start, end])
                    placed = True
                merged.append([a, b])
            else:
                start, end = min(a, start), max(b, end)
        if not placed:
            merged.append([start, end])
        merged.sort()
        self.detached = merged

    def _absorb(self) -> None:
        keep = []
        for a, b in self.detached:
            if a <= self.base_end:
                self.base_end = max(self.base_end, b)
            else:
                keep.append([a, b])
        self.detached = keep

    def splice(self, start: int, end: int) -> None:
        """Declare a lost range applied (the missing-data disaster path)."""
        self.insert(start, end)

    def compact_below(self, point: int) -> None:
        """Records below ``point`` were released: raise the floor. ``point`` must be inside
        the base, since nothing may be released that was never applied."""
        if point > self.base_end:
            raise ValueError(f"cannot compact below {point}: base ends at {self.base_end}")
        self.floor = max(self.floor, point)

    def copy(self) -> "IntervalMap":
        """An independent copy."""
        return IntervalMap(self.base_end, self.floor, [list(r) for r in self.detached])

    # ---- encoding --------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """Compact binary form (stored in LevelDB)."""
        flat = [x for r in self.detached for x in r]
        return struct.pack(f">qqI{len(flat)}q", self.floor, self.base_end, len(self.detached),
                           *flat)

    @classmethod
    def from_bytes(cls, data: bytes) -> "IntervalMap":
        """Inverse of :meth:`to_bytes`."""
        floor, base_end, n = struct.unpack_from(">qqI", data)
        flat = struct.unpack_from(f">{2 * n}q", data, 20)
        return cls(base_end, floor, [[flat[2 * i], flat[2 * i + 1]] for i in range(n)])

    def to_json(self) -> dict[str, list[Any]]:
        """Status form: ``{"base": [floor, end], "detached": [[a, b], ...]}``."""
        return {"base": [self.floor, self.base_end], "detached": [list(r) for r in self.detached]}
