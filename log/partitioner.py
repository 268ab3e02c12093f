"""Where a peer lives: Kafka's Java default partitioner, murmur2(key) mod P."""

from __future__ import annotations

__all__ = ["murmur2", "partition_for", "partition_for_peer"]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        i4 = i * 4
        k = (data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24))
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    tail = n4 * 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The Java client's default partition for a non-null key: ``toPositive(murmur2) % P``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


_cache: dict[tuple[str, int], int] = {}


def partition_for_peer(peer_id: str, partitions: int) -> int:
    """The txlog (and queues) partition of peer ``peer_id``; the one place this is computed."""
    hit = _cache.get((peer_id, partitions))
    if hit is None:
        hit = partition_for(peer_id.encode("utf-8"), partitions)
        if len(_cache) < 1_000_000:
            _cache[(peer_id, partitions)] = hit
    return hit
