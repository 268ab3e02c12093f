"""The stateful step of the job, on pandas: decode txlog rows, apply them per peer, emit rows.

This is what runs inside Spark's ``transformWithStateInPandas`` for one group (one txlog
partition; each peer's state is an entry of a MapState), kept free of Spark so it can be
tested alone. Output rows (:data:`OUTPUT_SCHEMA`) are:

* ``entry``: a QueueEntry upsert (``key`` = peer NUL message id, ``value`` = QueueEntry);
* ``tombstone``: the same key with a null value;
* ``dead``: an undecodable or inconsistent txlog record, to copy to ``deadletter``;
* ``mark``: one per txlog partition: the highest txlog offset the batch applied.
"""

from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from log.codec import Codec, default_codec
from log.exceptions import CodecError
from spark_streaming.queue_state import (ACK, PURGE, SEND, Event, PeerState, apply_events,
                                         queue_key)

__all__ = ["OUTPUT_SCHEMA", "PEER_KEY_SCHEMA", "STATE_SCHEMA", "INPUT_COLUMNS", "ENTRY",
           "TOMBSTONE", "DEAD", "MARK", "process_rows"]

#: Columns the job selects from the Kafka source, in this order.
INPUT_COLUMNS = ("key", "value", "partition", "offset")
#: Spark DDL of the rows :func:`process_rows` returns.
OUTPUT_SCHEMA = ("kind string, key binary, value binary, partition int, offset long,"
                 " reason string")
#: Spark DDL of the per-peer state's key (a MapState user key) and value (a PeerState).
PEER_KEY_SCHEMA = "peer string"
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


def process_rows(rows: pd.DataFrame, load: Callable[[str], bytes | None],
                 store: Callable[[str, bytes | None], None], ack_ttl_ms: int,
                 dedup_window_ms: int | None = None, codec: Codec | None = None) -> pd.DataFrame:
    """Apply a batch's txlog rows (any order; normally one txlog partition) to peer states.

    ``load(peer)`` returns a peer's serialized state (``None`` if it has none) and
    ``store(peer, blob)`` saves it (``None``: the state became empty and can be dropped).
    Each touched peer's state is loaded and stored once. Returns the output rows.
    """
    codec = codec or default_codec()
    rows = rows.sort_values(["partition", "offset"], kind="stable")
    out: list[tuple[Any, ...]] = []
    events: dict[str, list[Event]] = {}
    where: dict[tuple[str, int], int] = {}  # (peer, txlog offset) -> txlog partition
    for key, value, part, off in zip(rows["key"], rows["value"], rows["partition"],
                                     rows["offset"]):
        part, off = int(part), int(off)
        peer = _peer_of(key)
        try:
            decoded = codec.decode(None if value is None else bytes(value))
            event = _event(peer, decoded.name, decoded.record, off)
        except (CodecError, ValueError, KeyError, TypeError) as exc:
            out.append((DEAD, bytes(key) if key else None,
                        None if value is None else bytes(value), part, off,
                        f"{type(exc).__name__}: {exc}"))
            continue
        assert peer is not None
        events.setdefault(peer, []).append(event)
        where[(peer, off)] = part
    for peer in sorted(events):
        state = PeerState.from_bytes(load(peer))
        changes = apply_events(state, events[peer], ack_ttl_ms, dedup_window_ms)
        store(peer, None if state.empty else state.to_bytes())
        last_part = where[(peer, events[peer][-1].offset)]
        for change in changes:
            qkey = queue_key(peer, change.message_id).encode()
            if change.upsert and change.send is not None:
                send = change.send
                rec = send.record or {}
                part = where[(peer, send.offset)]
                value = codec.encode("QueueEntry", {
                    "peer": peer, "message_id": change.message_id, "sender": rec["sender"],
                    "message_type": rec["message_type"], "payload": rec["payload"],
                    "timestamp_ms": send.timestamp_ms, "txlog_partition": part,
                    "txlog_offset": send.offset, "delivery_count": rec.get("delivery_count", 0)})
                out.append((ENTRY, qkey, value, part, send.offset, None))
            else:
                out.append((TOMBSTONE, qkey, None, last_part, -1, None))
    if len(rows):
        for part, top in rows.groupby("partition")["offset"].max().items():
            out.append((MARK, None, None, int(part), int(top), None))
    frame = pd.DataFrame(out, columns=["kind", "key", "value", "partition", "offset", "reason"])
    return frame.astype({"partition": "int32", "offset": "int64"})
