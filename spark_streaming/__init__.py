"""The Spark Structured Streaming job that materializes per-peer unacked queues.

Pure per-message state logic lives in :mod:`spark_streaming.queue_state`; how it is laid out
in Spark's MapStates in :mod:`spark_streaming.state_layout`; the pandas step (decode, batched
state reads and writes, output rows) in :mod:`spark_streaming.transform`; the fast state I/O
over PySpark's state socket in :mod:`spark_streaming.pyspark_state`; the streaming query in
:mod:`spark_streaming.job` (imports pyspark lazily); reading the result in
:mod:`spark_streaming.depth`.
"""

from spark_streaming.exceptions import QueryFailedError, QueuesError, SparkUnavailableError
from spark_streaming.queue_expiry import plan_expiry
from spark_streaming.queue_state import (
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
from spark_streaming.state_layout import MemoryMaps, StateMaps
from spark_streaming.transform import apply_batch, process_rows

__all__ = [
    "DEFAULT_ACK_TTL_MS", "DEFAULT_DEDUP_WINDOW_MS", "DEFAULT_DELIVERY_LIMIT", "Change", "Entry",
    "Event", "Letter", "PeerMeta",
    "Ttl", "is_progress_key", "plan_events", "plan_expiry", "progress_key", "queue_key",
    "split_queue_key", "MemoryMaps", "StateMaps", "apply_batch", "process_rows",
    "QueuesError", "QueryFailedError", "SparkUnavailableError",
]
