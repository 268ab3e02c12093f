"""Range acks in a replica's store: one index key per range, not one per id.

An AckBatch with a range (``txlog_partition``, ``first_offset``, ``last_offset``: what a
peer appends for the messages it replayed, :mod:`tidemark.peer_client.acks`) acks each of its
ids' Sends that lie in that stretch of the partition. Ingest writes it as one key,
``K k peer NUL <first> <last> <batch offset>`` -> the ids joined by NUL (:func:`put_acks`),
where a batch without a range (or with one that does not fit the record: another partition,
first above last, an id holding NUL) gets one Ack index key per id as before. GC asks a
:class:`RangeIndex` whether a Send is acked by a range below the GC point: the peer's range
keys are read once per pass (keys only), the ids of a range only when a Send falls in it.

A Send of a range-acked id that lies outside the range (a duplicate appended later) is not
released by the range: an Ack of the id, or a Purge of the peer, releases it.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidemark.log.wire import Span
from tidemark.replica.keys import ack_prefix

__all__ = ["range_prefix", "range_key", "record_span", "ranged", "put_acks", "RangeIndex"]

_H = struct.Struct(">H")
_Q = struct.Struct(">Q")
_QQQ = struct.Struct(">QQQ")


def range_prefix(partition: int) -> bytes:
    """The prefix of txlog ``partition``'s range ack keys."""
    return b"K" + _H.pack(partition)


def range_key(partition: int, peer: bytes, first: int, last: int, at: int) -> bytes:
    """The key of the range ack at txlog offset ``at`` of ``peer`` over ``[first, last]``."""
    return range_prefix(partition) + peer + b"\0" + _QQQ.pack(first, last, at)


def record_span(rec: Mapping[str, Any]) -> Span | None:
    """The range of a decoded AckBatch record ``rec`` (None without one: an older writer's,
    or ``txlog_partition`` -1)."""
    k = int(rec.get("txlog_partition", -1))
    return (k, int(rec.get("first_offset", -1)), int(rec.get("last_offset", -1))) \
        if k >= 0 else None


def ranged(partition: int, ids: Sequence[bytes], span: Span | None) -> bool:
    """Whether an AckBatch of ``ids`` in txlog ``partition`` is indexed by its range."""
    if span is None:
        return False
    k, first, last = span
    # one C-level search of the ids joined: an id holding NUL would make the joined value
    # ambiguous (a generator over the ids cost a replica 9 % of its replay-time CPU)
    return (k == partition and 0 <= first <= last and len(ids) > 0
            and b"\0" not in b"".join(ids))


def put_acks(put: Callable[[bytes, bytes], None], partition: int, offset: int, peer: bytes,
             ids: Sequence[bytes], span: Span | None) -> None:
    """Index the AckBatch at txlog ``offset`` of ``peer``'s ``ids``: one range key when it
    is :func:`ranged`, else one Ack index key per id (each naming the batch's offset)."""
    if ranged(partition, ids, span):
        assert span is not None
        put(range_key(partition, peer, span[1], span[2], offset), b"\0".join(ids))
        return
    head, at = ack_prefix(partition) + peer + b"\0", _Q.pack(offset)
    for mid in ids:
        put(head + mid, at)


class _PeerRanges:
    """One peer's range keys, by first offset, with the running maximum of last offsets."""

    __slots__ = ("keys", "firsts", "lasts", "reach", "ats", "ids")

    def __init__(self, keys: list[bytes]) -> None:
        self.keys = keys
        spans = [_QQQ.unpack(key[-24:]) for key in keys]
        self.firsts = [s[0] for s in spans]
        self.lasts = [s[1] for s in spans]
        self.ats = [s[2] for s in spans]
        self.reach: list[int] = []
        top = -1
        for last in self.lasts:
            top = max(top, last)
            self.reach.append(top)
        self.ids: dict[int, frozenset[bytes]] = {}


class RangeIndex:
    """Whether a Send is acked by a range ack below a GC point, for txlog ``partition``
    (one per GC pass: a range ingested during the pass waits for the next one)."""

    def __init__(self, get: Callable[[bytes], bytes | None],
                 keys: Callable[[bytes], Sequence[bytes]], partition: int) -> None:
        self._get, self._keys, self._prefix = get, keys, range_prefix(partition)
        self._peers: dict[bytes, _PeerRanges | None] = {}

    def acked(self, peer: bytes, message_id: bytes, offset: int, point: int) -> bool:
        """Whether a range ack of ``peer`` at an offset below ``point`` covers ``offset``
        and lists ``message_id``."""
        got = self._peers.get(peer, self)
        if got is self:
            keys = self._keys(self._prefix + peer + b"\0")
            got = self._peers[peer] = _PeerRanges(list(keys)) if keys else None
        if got is None:
            return False
        assert isinstance(got, _PeerRanges)
        i = bisect_right(got.firsts, offset) - 1
        reach, lasts, ats = got.reach, got.lasts, got.ats
        while i >= 0 and reach[i] >= offset:
            if lasts[i] >= offset and ats[i] < point:
                ids = got.ids.get(i)
                if ids is None:
                    raw = self._get(got.keys[i])
                    ids = got.ids[i] = frozenset(raw.split(b"\0")) if raw else frozenset()
                if message_id in ids:
                    return True
            i -= 1
        return False
