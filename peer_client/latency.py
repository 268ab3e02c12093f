"""A peer's latency histograms, sampled: one send in :data:`SAMPLE_EVERY` and one handled
message in :data:`SAMPLE_EVERY` is timed (a histogram is a distribution: a regular sample of
it is the same distribution, and the other messages pay one counter test). Exported by
:class:`~tidemark.peer_client.metrics.PeerCollector` as Prometheus histograms.

- ``send_log``, ``send_quorum``, ``send_all``: from the send call until its durability level
  held (``log``: Kafka acknowledged the Send; ``quorum``/``all``: the replicas' stable cut
  passed it), failed sends not counted;
- ``handler``: one handler call, for a message handled alone (a run of messages handled
  together is timed as one call per message's share: its duration over its length);
- ``replay_batch``: every batch of a replay, from the peer receiving it until the inbox
  admitted all of it (through its limit, so at the pace of the handlers), per message of
  the batch.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from time import perf_counter
from typing import Any

__all__ = ["Latency", "Latencies", "Timed", "SAMPLE_EVERY", "BUCKETS", "NAMES"]

#: One message in this many is timed.
SAMPLE_EVERY = 16
#: Upper bounds (seconds) of the buckets, +Inf last implied: 100 µs to 60 s.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
           1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The histograms of a peer, by name.
NAMES = ("send_log", "send_quorum", "send_all", "handler", "replay_batch")


class Latency:
    """One histogram: counts per bucket, their sum and count; thread-safe."""

    __slots__ = ("_counts", "_sum", "_lock")

    def __init__(self) -> None:
        self._counts = [0] * (len(BUCKETS) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """Count one observation of ``seconds``."""
        i = bisect_left(BUCKETS, seconds)
        with self._lock:
            self._counts[i] += 1
            self._sum += seconds

    def snapshot(self) -> dict[str, Any]:
        """``{"buckets": [[upper bound, cumulative count], ...], "sum", "count"}`` (the
        last bound is ``"+Inf"``: the document stays JSON), as Prometheus writes them."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        out: list[list[Any]] = []
        running = 0
        for bound, n in zip((*BUCKETS, "+Inf"), counts, strict=True):
            running += n
            out.append([bound, running])
        return {"buckets": out, "sum": total, "count": running}


class Latencies:
    """A peer's histograms (:data:`NAMES`) and the counters that pick the sampled messages."""

    def __init__(self) -> None:
        self.by_name = {name: Latency() for name in NAMES}
        self._handled = 0

    def sample_handler(self, n: int = 1) -> bool:
        """Whether a job of the next ``n`` handled messages is timed: when it holds the
        sampled one (one in :data:`SAMPLE_EVERY`; an unlocked count: a lost increment only
        moves which message is sampled)."""
        before = self._handled
        self._handled = after = before + n
        return before // SAMPLE_EVERY != after // SAMPLE_EVERY

    def snapshot(self) -> dict[str, Any]:
        """Every histogram's :meth:`Latency.snapshot`, and the sampling rate."""
        return {"sample_every": SAMPLE_EVERY,
                **{name: h.snapshot() for name, h in self.by_name.items()}}


class Timed:
    """A sampled handler job: runs ``job`` and records its duration per message (``n``
    messages) in ``latency``."""

    __slots__ = ("job", "latency", "n")

    def __init__(self, job: Any, latency: Latency, n: int) -> None:
        self.job, self.latency, self.n = job, latency, n

    @property
    def is_async(self) -> bool:
        """Whether the job runs on the event loop."""
        return self.job.is_async

    def run(self) -> None:
        """Run the job, timed."""
        t0 = perf_counter()
        self.job.run()
        self.latency.observe((perf_counter() - t0) / self.n)

    async def run_async(self) -> None:
        """Run the ``async def`` job, timed."""
        t0 = perf_counter()
        await self.job.run_async()
        self.latency.observe((perf_counter() - t0) / self.n)
