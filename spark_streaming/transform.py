"""The per-peer step of the job, on pandas: decode a peer's txlog rows, apply them, emit rows.

This is what runs inside Spark's ``transformWithStateInPandas`` for one group (one txlog key),
kept free of Spark so it can be tested alone. Output rows (:data:`OUTPUT_SCHEMA`) are:

* ``entry``: a QueueEntry upsert (``key`` = peer NUL message id, ``value`` = QueueEntry);
* ``tombstone``: the same key with a null value;
* ``dead``: an undecodable or inconsistent txlog record, to copy to ``deadletter``;
* ``mark``: one per (group, txlog partition): the highest txlog offset the batch applied.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from log.codec import Codec, default_codec
from log.exceptions import CodecError
from spark_streaming.queue_state import (ACK, PURGE, SEND, Event, PeerState, apply_events,
                                         queue_key)

__all__ = ["OUTPUT_SCHEMA", "STATE_SCHEMA", "INPUT_COLUMNS", "ENTRY", "TOMBSTONE", "DEAD",
           "MARK", "process_peer"]

#: Columns the job selects from the Kafka source, in this order.
INPUT_COLUMNS = ("key", "value", "partition", "offset")
#: Spark DDL of the rows :func:`process_peer` returns.
OUTPUT_SCHEMA = ("kind string, key binary, value binary, partition int, offset long,"
                 " reason string")
#: Spark DDL of the per-peer state (a serialized :class:`PeerState`).
STATE_SCHEMA = "blob binary"
ENTRY, TOMBSTONE, DEAD, MARK = "entry", "tombstone", "dead", "mark"
_PEER_FIELD = {SEND: "recipient", ACK: "peer", PURGE: "peer"}


def _event(peer: str | None, decoded_name: str, record: dict[str, Any], offset: int) -> Event:
    field = _PEER_FIELD.get(decoded_name)
    if field is None:
        raise ValueError(f"a {decoded_name} record does not belong in txlog")
    if peer is None:
        raise ValueError("txlog record without a key (the recipient peer id)")
    if record[field] != peer:
        raise ValueError(f"key {peer!r} does not match the record's {field} {record[field]!r}")
    return Event(decoded_name, offset, int(record["timestamp_ms"]),
                 record.get("message_id", ""), record if decoded_name == SEND else None)


def _peer_of(key: Any) -> str | None:
    if key is None or len(key) == 0:
        return None
    try:
        return bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        return None


def process_peer(key: Any, rows: pd.DataFrame, blob: bytes | None, ttl_ms: int,
                 codec: Codec | None = None) -> tuple[pd.DataFrame, bytes | None]:
    """Apply one group's rows (any order) to its serialized state.

    Returns the output rows and the new state blob (``None`` when the state became empty
    and can be removed).
    """
    codec = codec or default_codec()
    rows = rows.sort_values(["partition", "offset"], kind="stable")
    peer = _peer_of(key)
    state = PeerState.from_bytes(blob)
    out: list[tuple[Any, ...]] = []
    events: list[Event] = []
    where: dict[int, int] = {}  # txlog offset -> partition
    for value, part, off in zip(rows["value"], rows["partition"], rows["offset"]):
        part, off = int(part), int(off)
        try:
            decoded = codec.decode(None if value is None else bytes(value))
            events.append(_event(peer, decoded.name, decoded.record, off))
            where[off] = part
        except (CodecError, ValueError, KeyError, TypeError) as exc:
            out.append((DEAD, bytes(key) if key else None,
                        None if value is None else bytes(value), part, off,
                        f"{type(exc).__name__}: {exc}"))
    changes = apply_events(state, events, ttl_ms) if events else []
    default_part = int(rows["partition"].iloc[-1]) if len(rows) else 0
    for change in changes:
        qkey = queue_key(peer or "", change.message_id).encode()
        if change.upsert and change.send is not None:
            send = change.send
            rec = send.record or {}
            value = codec.encode("QueueEntry", {
                "peer": peer, "message_id": change.message_id, "sender": rec["sender"],
                "message_type": rec["message_type"], "payload": rec["payload"],
                "timestamp_ms": send.timestamp_ms, "txlog_partition": where[send.offset],
                "txlog_offset": send.offset, "delivery_count": rec.get("delivery_count", 0)})
            out.append((ENTRY, qkey, value, where[send.offset], send.offset, None))
        else:
            out.append((TOMBSTONE, qkey, None, default_part, -1, None))
    if len(rows):
        for part, top in rows.groupby("partition")["offset"].max().items():
            out.append((MARK, None, None, int(part), int(top), None))
    frame = pd.DataFrame(out, columns=["kind", "key", "value", "partition", "offset", "reason"])
    frame = frame.astype({"partition": "int32", "offset": "int64"})
    return frame, (None if state.empty else state.to_bytes())
