"""The Spark Structured Streaming job that materializes per-peer unacked queues.

Pure per-message state logic lives in :mod:`tidemark.log.queue_state`; how it is laid
out in Spark's MapStates in :mod:`tidemark.spark_streaming.state_layout`; the pandas step (decode,
batched state reads and writes, output rows) in :mod:`tidemark.spark_streaming.transform`; the fast
state I/O over PySpark's state socket in :mod:`tidemark.spark_streaming.pyspark_state`; the
streaming query in :mod:`tidemark.spark_streaming.job` (imports pyspark lazily); reading the result
in :mod:`tidemark.spark_streaming.depth`.
"""

from tidemark.log.queue_expiry import plan_expiry
from tidemark.log.queue_state import (
    DEFAULT_ACK_TTL_MS,
    DEFAULT_DEDUP_WINDOW_MS,
    DEFAULT_DELIVERY_LIMIT,
    Change,
    Entry,
    Event,
    Letter,
    PeerMeta,
    Ttl,
    is_progress_key,
    plan_events,
    progress_key,
    queue_key,
    split_queue_key,
)
from tidemark.spark_streaming.exceptions import QueryFailedError, QueuesError, SparkUnavailableError
from tidemark.spark_streaming.state_layout import MemoryMaps, StateMaps
from tidemark.spark_streaming.transform import apply_batch, process_rows

__all__ = [
    "DEFAULT_ACK_TTL_MS", "DEFAULT_DEDUP_WINDOW_MS", "DEFAULT_DELIVERY_LIMIT", "Change", "Entry",
    "Event", "Letter", "PeerMeta",
    "Ttl", "is_progress_key", "plan_events", "plan_expiry", "progress_key", "queue_key",
    "split_queue_key", "MemoryMaps", "StateMaps", "apply_batch", "process_rows",
    "QueuesError", "QueryFailedError", "SparkUnavailableError",
]
