"""Prometheus metrics of the queues job, fed by a ``StreamingQueryListener`` on the driver.

The job (``tidemark queues run --metrics-port N``, ``TIDEMARK_QUEUES_METRICS_PORT``) serves
them on ``/metrics`` of its driver process, on ``TIDEMARK_METRICS_HOST`` (127.0.0.1 by
default). Every metric exists from the first scrape (counters at 0). The update logic is pure
(:func:`apply_progress`, :func:`apply_idle`, :func:`apply_terminated`, over the progress as a
plain dict, the JSON shape of ``StreamingQuery.lastProgress``); :func:`query_listener` is the
thin PySpark adapter that calls them from Spark's listener bus (a py4j callback thread).

Watermark lag: the job's query has no event-time watermark (it orders by txlog offset, not
by event time), so ``tidemark_queues_watermark_lag_seconds`` is, at each progress event, the
wall clock minus the newest batch's trigger time (Spark's ``timestamp``: when the batch
started), i.e. how old the newest applied data's batch was when it completed; should a
watermark ever be defined (``eventTime.watermark`` in the progress), it is the wall clock minus
that watermark instead. An idle query (no new txlog records: Spark posts an idle event every
10 s instead of a progress event) has caught up: the lag is set to 0. A stalled query posts
nothing: that shows as an ageing ``tidemark_queues_last_progress_timestamp_seconds``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from tidemark.log.runtime_metrics import runtime_registry

__all__ = ["QueuesMetrics", "BATCH_BUCKETS", "apply_progress", "apply_idle", "apply_terminated",
           "query_listener", "parse_spark_time"]

log = logging.getLogger(__name__)

#: Buckets (seconds) of the batch duration histogram: 50 ms to 2 min (a 500 ms trigger; a
#: busy machine or a backlog makes batches of tens of seconds).
BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 120.0)


class QueuesMetrics:
    """The metrics the queues job exports, in a registry of their own (with the process,
    platform and Python GC collectors)."""

    def __init__(self) -> None:
        self.registry = r = runtime_registry()
        self.batch_duration = Histogram(
            "tidemark_queues_batch_duration_seconds",
            "wall time of one micro-batch of the queues query, planning to commit (Spark's"
            " batchDuration)", registry=r, buckets=BATCH_BUCKETS)
        self.input_rows = Counter(
            "tidemark_queues_input_rows_total",
            "txlog records the queues query read, summed over its micro-batches (numInputRows)",
            registry=r)
        self.rows_per_second = Gauge(
            "tidemark_queues_input_rows_per_second",
            "txlog records the last micro-batch processed per second of its duration (Spark's"
            " processedRowsPerSecond; 0 when Spark reports none)", registry=r)
        self.state_rows = Gauge(
            "tidemark_queues_state_rows",
            "rows in the query's state store after the last micro-batch (numRowsTotal summed"
            " over the stateful operators: one per queued or remembered message)", registry=r)
        self.batches = Counter(
            "tidemark_queues_batches_total",
            "micro-batches the queues query completed (progress events), re-runs after a"
            " restart included", registry=r)
        self.last_progress = Gauge(
            "tidemark_queues_last_progress_timestamp_seconds",
            "Unix time of the query's last progress or idle event (0: none yet); an idle query"
            " reports every 10 s, so an old value means a stalled or stopped query", registry=r)
        self.watermark_lag = Gauge(
            "tidemark_queues_watermark_lag_seconds",
            "at the last progress event: wall clock minus the event-time watermark if the query"
            " has one, else minus the start of the newest micro-batch; 0 once idle (caught up)",
            registry=r)
        self.terminated = Counter(
            "tidemark_queues_query_terminated_total",
            "times the queues query terminated with an exception (the job then restarts it)",
            registry=r)
        self.port = 0

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host:port`` (port 0: any free one); returns the port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        self.port = int(server.server_address[1])
        return self.port


def parse_spark_time(text: str | None) -> float | None:
    """Seconds since the epoch of Spark's progress timestamps (``2026-11-24T10:00:00.123Z``);
    None if absent, unparsable, or the epoch itself (a watermark before any data)."""
    if not text:
        return None
    try:
        seconds = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def _number(value: Any) -> float:
    """A finite float of a progress figure (missing, null or NaN: 0)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def apply_progress(metrics: QueuesMetrics, progress: Mapping[str, Any],
                   now: float | None = None) -> None:
    """Update ``metrics`` from one progress event (``progress``: the JSON shape of
    ``StreamingQueryProgress``) observed at wall clock ``now`` (default: the current time).
    A progress without a batch (no ``addBatch`` duration, no rows: what Spark reports for a
    trigger that found no new data) counts as an idle event."""
    now = time.time() if now is None else now
    durations = progress.get("durationMs")
    if durations is not None and "addBatch" not in durations \
            and not _number(progress.get("numInputRows")):
        apply_idle(metrics, now)  # a trigger that found no data and ran no batch
        return
    metrics.batches.inc()
    metrics.batch_duration.observe(max(0.0, _number(progress.get("batchDuration"))) / 1e3)
    metrics.input_rows.inc(max(0.0, _number(progress.get("numInputRows"))))
    metrics.rows_per_second.set(_number(progress.get("processedRowsPerSecond")))
    operators = progress.get("stateOperators") or []
    metrics.state_rows.set(sum(_number(op.get("numRowsTotal")) for op in operators))
    metrics.last_progress.set(now)
    watermark = parse_spark_time((progress.get("eventTime") or {}).get("watermark"))
    started = watermark if watermark is not None else parse_spark_time(progress.get("timestamp"))
    if started is not None:
        metrics.watermark_lag.set(max(0.0, now - started))


def apply_idle(metrics: QueuesMetrics, now: float | None = None) -> None:
    """Update ``metrics`` from an idle event: the query runs and has nothing new to read."""
    metrics.last_progress.set(time.time() if now is None else now)
    metrics.watermark_lag.set(0.0)


def apply_terminated(metrics: QueuesMetrics, exception: str | None) -> None:
    """Update ``metrics`` when the query terminated (``exception`` None: a clean stop)."""
    if exception:
        metrics.terminated.inc()


def query_listener(metrics: QueuesMetrics) -> Any:
    """A ``StreamingQueryListener`` feeding ``metrics`` (register it with
    ``spark.streams.addListener``). It runs on Spark's listener bus through py4j; a failure
    to update is logged, never raised into Spark."""
    from pyspark.sql.streaming import StreamingQueryListener

    class MetricsListener(StreamingQueryListener):
        """Progress, idle and termination events -> :class:`QueuesMetrics`."""

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            try:
                # one py4j call for the plain JSON shape (what the pure update reads)
                apply_progress(metrics, json.loads(event.progress.json))
            except Exception as exc:  # never fail Spark's listener bus
                log.warning("could not update the metrics from a progress event: %s", exc)

        def onQueryIdle(self, event: Any) -> None:
            apply_idle(metrics)

        def onQueryTerminated(self, event: Any) -> None:
            try:
                apply_terminated(metrics, event.exception)
            except Exception as exc:
                log.warning("could not count a query termination: %s", exc)

    return MetricsListener()
