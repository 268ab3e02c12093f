"""Reading a Tidemark topic as a person or a script would (``tidemark log tail``).

Tidemark's records are Avro single-object encoded (the ``C3 01`` marker, the schema's
fingerprint, the body), which kcat and Kafka UIs cannot read. :func:`tail` reads any of the
five topics, from the beginning or the last records of each partition to the end (or on,
following), and :func:`record_json` turns each record into plain JSON: its place in the log,
its key, the schema's name and the decoded record. Bytes fields (a Send's payload, a
signature) are base64 text; a value that does not decode (a poison record, a schema this
build does not know) is shown with the reason and its first bytes, never skipped silently.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Message, TopicPartition

from tidemark.log.consumer import LogConsumer, read_to_end
from tidemark.log.exceptions import CodecError
from tidemark.log.offsets import watermarks
from tidemark.log.settings import Settings
from tidemark.log.wire import Codec

__all__ = ["tail", "record_json", "plain", "utc_text"]


def plain(value: Any) -> Any:
    """``value`` with bytes as base64 text, recursively (JSON-ready)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def utc_text(ms: float) -> str:
    """``ms`` since the epoch as UTC ISO 8601 text with milliseconds and ``Z``."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def record_json(msg: Message, codec: Codec | None, topic: str) -> dict[str, Any]:
    """One record as JSON: ``topic`` (logical), ``partition``, ``offset``, ``time`` (UTC),
    ``key``, ``bytes``; with a codec also ``schema`` and ``record``, or ``error`` and
    ``head`` (the first 16 bytes, hex) when the value does not decode."""
    key, value = msg.key(), msg.value()
    ts = msg.timestamp()[1]
    out: dict[str, Any] = {"topic": topic, "partition": msg.partition(), "offset": msg.offset(),
                           "time": utc_text(ts) if ts and ts > 0 else None,
                           "key": key.decode("utf-8", "replace") if key else None,
                           "bytes": len(value) if value is not None else None}
    if codec is None or value is None:
        if value is None:
            out["tombstone"] = True
        return out
    try:
        dec = codec.decode(value)
    except CodecError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["head"] = value[:16].hex()
        return out
    out["schema"], out["record"] = dec.name, plain(dec.record)
    return out


def _start_marks(settings: Settings, topic: str, last: int | None
                 ) -> dict[int, tuple[int, int]]:
    marks = watermarks(settings, topic)
    if last is None:
        return marks
    return {p: (max(lo, hi - last), hi) for p, (lo, hi) in marks.items()}


def tail(settings: Settings, topic: str = "txlog", *, last: int | None = 10,
         follow: bool = False, decode: bool = True, idle_s: float = 0.5
         ) -> Iterator[dict[str, Any]]:
    """The records of logical ``topic``: the ``last`` of each partition (None: from the
    beginning) up to the end each partition had at the call, then, with ``follow``, every
    new one until the caller stops iterating. Each as :func:`record_json`."""
    from tidemark.log.wire import default_codec
    codec = default_codec() if decode else None
    marks = _start_marks(settings, topic, last)
    for msgs in read_to_end(settings, topic, marks=marks):
        for msg in msgs:
            part, off = msg.partition(), msg.offset()
            if part is None or off is None or off >= marks[part][1]:
                continue
            yield record_json(msg, codec, topic)
    if not follow:
        return
    name = settings.topic(topic)
    with LogConsumer(settings) as consumer:
        consumer.raw.assign([TopicPartition(name, p, hi) for p, (_, hi) in marks.items()])
        while True:
            for msg in consumer.records_ready(1000, idle_s):
                yield record_json(msg, codec, topic)
