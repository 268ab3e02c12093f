"""The Spark Structured Streaming job that materializes per-peer unacked queues.

Pure state logic lives in :mod:`spark_streaming.queue_state`; the per-peer pandas step in
:mod:`spark_streaming.transform`; the streaming query in :mod:`spark_streaming.job` (imports
pyspark lazily); reading the result in :mod:`spark_streaming.depth`.
"""

from spark_streaming.exceptions import QueryFailedError, QueuesError, SparkUnavailableError
from spark_streaming.queue_state import (DEFAULT_ACK_TTL_MS, Change, Event, PeerState,
                                         apply_events, is_progress_key, progress_key,
                                         queue_key, split_queue_key)

__all__ = [
    "DEFAULT_ACK_TTL_MS", "Change", "Event", "PeerState", "apply_events", "is_progress_key",
    "progress_key", "queue_key", "split_queue_key", "QueuesError", "QueryFailedError",
    "SparkUnavailableError",
]
