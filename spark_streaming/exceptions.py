"""Errors of the Spark queues job and its tools (one readable line each on the CLI)."""

from __future__ import annotations

from tidemark.log.exceptions import TidemarkError

__all__ = ["QueuesError", "SparkUnavailableError", "QueryFailedError"]


class QueuesError(TidemarkError):
    """Base of the queues job's errors."""


class SparkUnavailableError(QueuesError):
    """pyspark (the ``spark`` extra) or a JVM is missing."""


class QueryFailedError(QueuesError):
    """The streaming query stopped with an error."""
