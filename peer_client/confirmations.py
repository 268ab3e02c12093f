"""What the replicas confirmed, and which durability waits that settles: pure bookkeeping,
no I/O and no threads (:class:`tidemark.peer_client.stability.ReplicaStability` feeds it from the
nodes' ``Watch`` streams and calls the callbacks it returns)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

__all__ = ["Confirmations", "Waiter", "LEVELS_WATCHED"]

#: The levels the replicas answer (``log`` is Kafka's acknowledgement alone).
LEVELS_WATCHED = ("quorum", "all")
Done = Callable[[BaseException | None], None]
_NONE: dict[int, tuple[int, int]] = {}  # a node with no report yet


class Waiter(NamedTuple):
    """One send waiting for ``level`` at txlog ``partition``/``offset`` until ``deadline``.
    A tuple, so the heap orders waiters by ``(offset, seq)`` in C (``seq`` is unique: the
    comparison never reaches ``deadline`` or ``done``); a dataclass's generated ordering
    cost a Python call per comparison, several per send at 10k msgs/s."""

    offset: int
    seq: int
    deadline: float
    done: Done


class Confirmations:
    """The applied and stable ends each node reported per txlog partition, and the waits
    they have not settled yet.

    ``quorum`` holds below the end that a majority of the partition's counting replicas
    applied (the ``need``-th largest applied end); ``all`` below the smallest applied end of
    all of them (what the universal stable cut of the partition is, read from the nodes' own
    reports before their gossip has told each other), or below the largest stable end any
    of them reported (every node's cut is honest, so one suffices), whichever is higher.
    Ends only move forward: a lower report than one already known is ignored."""

    def __init__(self) -> None:
        self.ends: dict[str, dict[int, tuple[int, int]]] = {}
        self._waiting: dict[tuple[str, int], list[Waiter]] = {}
        self._seq = itertools.count()
        # (level, partition) -> (the owners it was computed for, end): what :meth:`wait`
        # compares a new wait with, instead of computing the end again for every send;
        # dropped by each report of the partition
        self._known: dict[tuple[str, int], tuple[Sequence[str], int]] = {}

    def add(self, level: str, partition: int, offset: int, deadline: float, done: Done) -> None:
        """A send now waits for ``level`` at ``partition``/``offset`` (owners not known yet:
        :meth:`wait` with none, which holds nothing, so the send is always kept)."""
        self.wait(level, partition, offset, deadline, done, ())

    def wait(self, level: str, partition: int, offset: int, deadline: float, done: Done,
             owners: Sequence[str]) -> bool:
        """A send waits for ``level`` at ``partition``/``offset``, the partition owned by
        ``owners``: True if the reports so far already hold it (nothing is kept; the caller
        completes it), else it is added (as :meth:`add`) and False. One dictionary lookup
        for a send whose partition has had no report since the last wait."""
        key = (level, partition)
        known = self._known.get(key)
        if known is not None and known[0] is owners:
            end = known[1]
        else:
            if level not in LEVELS_WATCHED:
                raise ValueError(
                    f"level must be one of {', '.join(LEVELS_WATCHED)}, got {level!r}")
            end = self.end(level, partition, owners)
            self._known[key] = (owners, end)
        if offset < end:
            return True
        heap = self._waiting.get(key)
        if heap is None:
            heap = self._waiting[key] = []
        heapq.heappush(heap, Waiter(offset, next(self._seq), deadline, done))
        return False

    def report(self, node: str, ends: Mapping[int, tuple[int, int]]) -> None:
        """``node`` applied txlog ``partition`` below ``ends[partition][0]`` and its stable cut
        covers it below ``ends[partition][1]``."""
        known, cached = self.ends.setdefault(node, {}), self._known
        for k, (applied, stable) in ends.items():
            old = known.get(k, (0, 0))
            known[k] = (max(old[0], applied), max(old[1], stable))
            for level in LEVELS_WATCHED:
                cached.pop((level, k), None)

    def end(self, level: str, partition: int, owners: Sequence[str]) -> int:
        """Below which offset ``partition`` holds at ``level`` by the reports so far."""
        if not owners:
            return 0
        ends, none = self.ends, _NONE
        if level == "quorum":
            applied = sorted((ends.get(n, none).get(partition, (0, 0))[0] for n in owners),
                             reverse=True)
            return applied[len(owners) // 2]  # the (majority)-th largest
        least, stable = -1, 0  # one loop: this runs for every send at durability all
        for n in owners:
            a, st = ends.get(n, none).get(partition, (0, 0))
            if least < 0 or a < least:
                least = a
            if st > stable:
                stable = st
        return max(least, stable)

    def confirmed(self, level: str, partition: int, offset: int,
                  owners: Sequence[str]) -> list[str]:
        """The owners whose reports show ``offset`` applied on them (``quorum`` needs a
        majority of them, ``all`` every one, unless a stable end reported covers it)."""
        return [n for n in owners if self.ends.get(n, {}).get(partition, (0, 0))[0] > offset]

    def settle(self, partitions: Iterable[int],
               owners: Mapping[int, Sequence[str]]) -> list[Done]:
        """Take the waits of ``partitions`` that now hold; returns their callbacks."""
        out: list[Done] = []
        waiting, pop = self._waiting, heapq.heappop
        for k in partitions:
            for level in LEVELS_WATCHED:
                heap = waiting.get((level, k))
                if not heap:
                    continue
                mine = owners.get(k, ())
                end = self.end(level, k, mine)
                self._known[(level, k)] = (mine, end)
                while heap and heap[0][0] < end:
                    out.append(pop(heap)[3])
        return out

    def expire(self, now: float) -> list[tuple[str, int, Waiter]]:
        """Take every wait whose deadline passed: ``(level, partition, waiter)``."""
        out: list[tuple[str, int, Waiter]] = []
        for (level, k), heap in self._waiting.items():
            if any(w.deadline <= now for w in heap):
                keep = [w for w in heap if w.deadline > now]
                out.extend((level, k, w) for w in heap if w.deadline <= now)
                heapq.heapify(keep)
                self._waiting[(level, k)] = keep
        return out

    def take(self, partitions: Iterable[int] | None = None) -> list[tuple[str, int, Waiter]]:
        """Take every wait (of ``partitions``, or all): to fail them."""
        wanted = None if partitions is None else set(partitions)
        out: list[tuple[str, int, Waiter]] = []
        for (level, k), heap in list(self._waiting.items()):
            if wanted is None or k in wanted:
                out.extend((level, k, w) for w in heap)
                del self._waiting[(level, k)]
        return out

    def partitions(self) -> set[int]:
        """The partitions with a pending wait."""
        return {k for (_, k), heap in self._waiting.items() if heap}

    def __len__(self) -> int:
        return sum(len(heap) for heap in self._waiting.values())
