"""Structured logs of the ``tidemark`` processes: one JSON object a line on stderr.

Built on python-json-logger, so a message with quotes, newlines or a traceback is still one
valid JSON line (``exc_info`` holds the traceback as a string). Fields: ``ts`` (UTC, ISO 8601
with ``Z``), ``level``, ``logger``, ``msg``, and any ``extra=`` a call passes.

librdkafka's own lines (``tidemark.librdkafka``: broker down, connection refused, leader
changes) are WARNING in the long-running services (``replica run``, ``queues run``), where an
operator needs them; in one-shot commands the outcome is reported as one ``tidemark: error:``
line instead, and they are shown only with ``--log-level DEBUG``.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

from pythonjsonlogger.json import JsonFormatter

from tidemark.log.tail import utc_text

__all__ = ["configure", "UtcJsonFormatter"]

RDKAFKA = "tidemark.librdkafka"
_HANDLER = "tidemark-json"


class UtcJsonFormatter(JsonFormatter):
    """JSON lines with ``ts`` in UTC (millisecond precision, ``Z``)."""

    def __init__(self) -> None:
        super().__init__("{levelname}{name}{message}", style="{",
                         rename_fields={"levelname": "level", "name": "logger",
                                        "message": "msg"})

    def add_fields(self, log_record: dict[str, Any], record: logging.LogRecord,
                   message_dict: dict[str, Any]) -> None:
        log_record["ts"] = utc_text(record.created * 1000)
        super().add_fields(log_record, record, message_dict)


def configure(level: str | int, service: bool = False, stream: IO[str] | None = None) -> None:
    """Send every log line at ``level`` and above to ``stream`` (stderr) as JSON.
    ``service``: a long-running process (librdkafka's warnings and errors shown)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(UtcJsonFormatter())
    handler.set_name(_HANDLER)
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER:  # configured before: replaced, others left alone
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    rdkafka = logging.getLogger(RDKAFKA)
    if root.level <= logging.DEBUG:
        rdkafka.setLevel(logging.NOTSET)
    else:
        rdkafka.setLevel(logging.WARNING if service else logging.CRITICAL)
