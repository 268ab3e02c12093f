"""What callers may hold of a replica server: nobody can starve gossip or other peers.

A gRPC server has one pool of threads, and a stream holds one for as long as it runs. So:

- peer-facing calls (replays, pins, durability waits and their streams) may hold at most
  three quarters of the threads together: the last quarter (``reserve``) is the cluster's
  (gossip, status, backfill), which peers cannot take;
- one caller (a certificate identity) holds at most ``per_caller`` streams at once;
- a stream whose first message does not come within ``first_message_s`` is cancelled.

Over the limit a call ends at once with RESOURCE_EXHAUSTED (:class:`ReplicaBusyError`): a
peer's replay then tries another replica, a wait is retried.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from tidemark.gossip.exceptions import ReplicaBusyError

__all__ = ["CallLimits", "STREAMS_PER_CALLER", "FIRST_MESSAGE_S"]

STREAMS_PER_CALLER = 8
FIRST_MESSAGE_S = 5.0


class CallLimits:
    """Counts the peer-facing calls and streams a server runs, and refuses the excess."""

    def __init__(self, workers: int, reserve: int | None = None,
                 per_caller: int = STREAMS_PER_CALLER,
                 first_message_s: float = FIRST_MESSAGE_S) -> None:
        self.workers = workers
        reserve = max(1, workers // 4) if reserve is None else reserve
        self.peer_threads = max(1, workers - reserve)
        self.per_caller = per_caller
        self.first_message_s = first_message_s
        self._lock = threading.Lock()
        self._held = 0
        self._streams: Counter[str] = Counter()
        self.refused = 0

    @contextmanager
    def peer_call(self, caller: str | None, stream: bool) -> Iterator[None]:
        """Hold one of the peers' threads (and, for a stream of a known ``caller``, one of its
        streams) while the body runs; raises :class:`ReplicaBusyError` when none is left."""
        with self._lock:
            why = None
            if self._held >= self.peer_threads:
                why = f"all {self.peer_threads} threads for peers are busy"
            elif stream and caller is not None and self._streams[caller] >= self.per_caller:
                why = f"{caller} already holds {self.per_caller} streams"
            if why is not None:
                self.refused += 1
                raise ReplicaBusyError(f"busy: {why}; retry or use another replica")
            self._held += 1
            if stream and caller is not None:
                self._streams[caller] += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1
                if stream and caller is not None:
                    self._streams[caller] -= 1
                    if not self._streams[caller]:
                        del self._streams[caller]

    def snapshot(self) -> dict[str, int]:
        """Threads held by peers, streams by caller count, refusals so far."""
        with self._lock:
            return {"peer_threads_held": self._held, "peer_threads": self.peer_threads,
                    "callers_with_streams": len(self._streams), "refused": self.refused}
