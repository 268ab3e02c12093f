"""The applied and stable ends of a replica node's txlog partitions, and the waits of peers on
them: ``WaitApplied``, ``WaitStable`` and their stream ``Watch``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from tidemark.gossip.exceptions import ReplayRefusedError
from tidemark.replica.cut import CutKeeper
from tidemark.replica.exceptions import ReplicaError
from tidemark.replica.ingest import Ingestor
from tidemark.replica.store import Store

__all__ = ["Ends", "watch_hold"]


def watch_hold(now: float, last_sent: float, gap: float) -> float:
    """How long a ``Watch`` stream holds a move back before sending it: the rest of the
    gap since its last message (0: send now). Under traffic a node applies records every
    fetch (about 150 steps a second per node at 10k msgs/s on 2x2), and each message costs
    both ends of the stream a gRPC round of Python (about 0.25 ms of CPU on each side), so
    the gap bounds that cost at one message per gap while a quiet stream answers at once."""
    return max(0.0, last_sent + gap - now)


class Ends:
    """Answers waits on the ends; ``progress`` is notified when records apply or the cut
    moves."""

    def __init__(self, node_id: str, store: Store, cut: CutKeeper, ingest: Ingestor,
                 progress: threading.Condition, stopping: threading.Event,
                 watch_gap_s: float = 0.02) -> None:
        self.node_id, self.store, self.cut, self.ingest = node_id, store, cut, ingest
        self.progress, self.stopping, self.watch_gap_s = progress, stopping, watch_gap_s

    def end(self, k: int) -> tuple[int, int]:
        """(applied end, stable end) of txlog partition ``k`` on this node."""
        return self.store.map("txlog", k).base_end, self.cut.ust.get(f"txlog/{k}", 0)

    def ends(self, partitions: list[int]) -> dict[str, list[int]]:
        """``{partition: [applied end, stable end]}`` of txlog ``partitions``."""
        return {str(k): list(self.end(k)) for k in partitions}

    def wait_applied(self, body: bytes) -> bytes:
        """``{partition, offset, timeout_ms}`` -> ``{reached, ...}`` once this node applied
        txlog offset ``offset`` (its contiguous base covers it) or the timeout passed."""
        return self._wait(body, 0)

    def wait_stable(self, body: bytes) -> bytes:
        """Like ``WaitApplied``, until the universal stable cut covers the offset."""
        return self._wait(body, 1)

    def _wait(self, body: bytes, which: int) -> bytes:
        """Block until end ``which`` (0 applied, 1 stable) of the request's partition passes
        its offset, or the request's deadline."""
        req = json.loads(body)
        k, offset = int(req["partition"]), int(req["offset"])
        if k not in self.ingest.partitions:
            raise ReplicaError(f"{self.node_id} does not own txlog/{k}")
        deadline = time.monotonic() + min(float(req.get("timeout_ms", 5000)), 60_000) / 1000
        with self.progress:
            while self.end(k)[which] <= offset and not self.stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.progress.wait(min(left, 0.5))
        applied, stable = self.end(k)
        return json.dumps({"reached": (applied, stable)[which] > offset, "node": self.node_id,
                           "applied_end": applied, "stable_end": stable}).encode()

    def watch(self, requests: Iterator[bytes],
              context: grpc.ServicerContext) -> Iterator[bytes]:
        """The stream behind peers' durability waits (``quorum``/``all``): one request
        ``{partitions?}`` (default: every txlog partition this node owns), then one message
        ``{"ends": {partition: [applied end, stable end]}, "node"}`` at once and again each
        time an end moves (only the partitions that moved), until the caller goes away,
        at most one message every ``watch_gap_s``: a move that comes sooner after the last
        message waits out the rest of the gap, and the message then carries every move
        since. A partition this node does not own is listed once under ``"unowned"``. One
        stream replaces a unary wait per partition and answer: the node wakes it when
        records apply or the cut moves, and sends what changed."""
        try:
            req = json.loads(next(requests, b"{}") or b"{}")
            asked = [int(k) for k in req.get("partitions", self.ingest.partitions)]
        except (ValueError, TypeError, AttributeError) as exc:
            raise ReplayRefusedError(f"malformed Watch request: {exc}") from None
        owned = set(self.ingest.partitions)
        partitions = [k for k in asked if k in owned]
        sent: dict[str, list[int]] = {}
        first: dict[str, Any] = {"node": self.node_id,
                                 "unowned": [k for k in asked if k not in owned]}
        last = 0.0  # set by the first message, which never waits
        while not self.stopping.is_set() and context.is_active():
            with self.progress:
                ends = self.ends(partitions)
                if ends == sent:
                    self.progress.wait(0.5)
                    ends = self.ends(partitions)
            if ends != sent and not first:
                hold = watch_hold(time.monotonic(), last, self.watch_gap_s)
                if hold > 0 and not self.stopping.wait(hold):
                    with self.progress:
                        ends = self.ends(partitions)  # and whatever moved meanwhile
            moved = {k: v for k, v in ends.items() if sent.get(k) != v}
            if moved or first:
                sent, last = ends, time.monotonic()
                yield json.dumps({**first, "ends": moved}).encode()
                first = {}
