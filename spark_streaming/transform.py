"""The stateful step of the job, on pandas: decode txlog rows, apply them, emit output rows.

This is what runs inside Spark's ``transformWithStateInPandas`` for one state group (the txlog
partitions ``p`` with ``p % groups`` equal, :mod:`tidemark.spark_streaming.state_groups`), kept free
of Spark: the state is reached through :class:`~tidemark.spark_streaming.state_layout.StateMaps`
(batched reads and writes of per-message entries), and the decisions are
:mod:`tidemark.log.queue_state`'s. A batch reads and writes only the entries its rows
name (plus expired memories, and the whole group for a Purge), in a handful of batched round trips.
Output rows (:data:`OUTPUT_SCHEMA`) are:

* ``entry``: a QueueEntry upsert (``key`` = peer NUL message id, ``value`` = QueueEntry);
  when only the delivery count changed and the Send was in an earlier batch, ``value`` is
  null and ``offset``/``count`` say which Send and which count: the sink reads that Send back
  from txlog (failures are rare; the state keeps no message bytes);
* ``tombstone``: the same key with a null value;
* ``letter``: a message that failed ``delivery_limit`` times: ``key`` = peer NUL message id,
  ``value`` = the original Send's bytes (null when the Send was in an earlier batch: the sink
  reads it back), ``offset`` = the Send's txlog offset, ``count``, ``reason`` = last reason;
* ``dead``: an undecodable or inconsistent txlog record, to copy to ``deadletter``;
* ``refused-environment`` / ``refused-signature``: a record the job's
  :class:`~tidemark.gossip.txlog_admission.TxlogAdmission` does not apply (another
  environment's; an Ack, Purge or DeliveryFailed not signed by who may write it), to copy to
  ``deadletter`` with the reason and count by kind;
* ``purge``: an operator's Purge the batch applied, to keep in ``queues`` (``key`` = NUL
  peer, ``value`` = the Purge, ``partition`` = the peer's txlog partition): the replicas
  learn from it which Sends they may release;
* ``mark``: one per txlog partition: the highest txlog offset the batch applied.

Purges come from the ``purges`` topic (rows whose ``purge`` column is true; only the
operator may write there), each reaching the Sends below an offset of the peer's txlog
partition, and apply at that position among the peer's txlog events. A Purge in txlog is
poison. A ``dead`` or refused row of a ``purges`` record has ``count`` 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidemark.gossip.txlog_admission import TxlogAdmission
from tidemark.log.exceptions import CodecError
from tidemark.log.queue_expiry import expiry_chunks, expiry_reads, plan_expiry
from tidemark.log.queue_state import (
    ACK,
    ACK_BATCH,
    FAIL,
    MAX_ID_BYTES,
    PURGE,
    SEND,
    Change,
    Chunk,
    Entry,
    Event,
    PeerMeta,
    Ttl,
    plan_events,
    purge_key,
    queue_key,
)
from tidemark.log.wire import Codec, RecordReader, default_codec

if TYPE_CHECKING:  # pandas comes with the [spark] extra; peers and replicas run without it
    import pandas as pd
from tidemark.spark_streaming.state_layout import (
    StateMaps,
    chunk_key,
    chunk_of,
    chunk_value,
    entry_key,
    entry_of,
    entry_value,
    meta_key,
    meta_of,
    meta_value,
    split_entry_key,
)

__all__ = ["OUTPUT_SCHEMA", "OUTPUT_COLUMNS", "INPUT_COLUMNS", "ENTRY", "TOMBSTONE", "DEAD",
           "MARK", "LETTER", "PURGED", "REFUSED_ENVIRONMENT", "REFUSED_SIGNATURE", "REFUSED",
           "apply_batch", "process_rows"]

#: Columns the job selects from the Kafka source, in this order (``purge``: the row is from
#: the ``purges`` topic, not txlog; optional, false when absent).
INPUT_COLUMNS = ("key", "value", "partition", "offset", "purge")
#: Spark DDL of the rows :func:`process_rows` returns.
OUTPUT_SCHEMA = ("kind string, key binary, value binary, partition int, offset long,"
                 " reason string, count int")
ENTRY, TOMBSTONE, DEAD, MARK, LETTER = "entry", "tombstone", "dead", "mark", "letter"
PURGED = "purge"
#: Output kinds of refused records, by refusal kind (``environment``, ``signature``).
REFUSED_ENVIRONMENT, REFUSED_SIGNATURE = "refused-environment", "refused-signature"
REFUSED = {"environment": REFUSED_ENVIRONMENT, "signature": REFUSED_SIGNATURE}
_PEER_FIELD = {SEND: "recipient", ACK: "peer", FAIL: "peer", ACK_BATCH: "peer"}
#: Column names of the output rows, in :data:`OUTPUT_SCHEMA` order.
OUTPUT_COLUMNS = ("kind", "key", "value", "partition", "offset", "reason", "count")
_COLUMNS = list(OUTPUT_COLUMNS)
_Id = tuple[str, str]                # (peer, message id)
_ChunkId = tuple[str, int, int]      # (peer, fifo, seq)


def _events(peer: str | None, decoded_name: str, record: dict[str, Any], offset: int
            ) -> list[Event]:
    """The events of one txlog record: an AckBatch is the Acks of its ids, in order. An id
    no Send can carry (over :data:`MAX_ID_BYTES`: such Sends are dead-lettered) is skipped,
    not held against the batch's other acks."""
    if decoded_name != ACK_BATCH:
        return [_event(peer, decoded_name, record, offset)]
    _event(peer, decoded_name, record, offset)  # checks the key against the peer
    return [_event(peer, ACK, {"peer": record["peer"], "message_id": mid,
                               "timestamp_ms": record["timestamp_ms"]}, offset)
            for mid in record["message_ids"] if len(mid.encode()) <= MAX_ID_BYTES]


def _event(peer: str | None, decoded_name: str, record: dict[str, Any], offset: int) -> Event:
    field = _PEER_FIELD.get(decoded_name)
    if field is None:
        raise ValueError(f"a {decoded_name} record does not belong in txlog")
    if peer is None:
        raise ValueError("txlog record without a key (the recipient peer id)")
    if record[field] != peer:
        raise ValueError(f"key {peer!r} does not match the record's {field} {record[field]!r}")
    mid = record.get("message_id", "")
    if len(peer.encode()) > MAX_ID_BYTES or len(mid.encode()) > MAX_ID_BYTES:
        raise ValueError(f"peer or message id longer than {MAX_ID_BYTES} bytes")
    if "\x00" in peer:
        raise ValueError("peer id with a NUL character (queue keys are peer NUL message id)")
    return Event(decoded_name, offset, int(record["timestamp_ms"]), mid,
                 record if decoded_name in (SEND, FAIL) else None)


def _purge_event(peer: str | None, decoded_name: str, record: dict[str, Any], part: int
                 ) -> Event:
    """The event of one ``purges`` record: a Purge at the offset it reaches."""
    if decoded_name != PURGE:
        raise ValueError(f"a {decoded_name} record does not belong in purges")
    if peer is None or record["peer"] != peer:
        raise ValueError(f"key {peer!r} does not match the Purge's peer {record['peer']!r}")
    if int(record["txlog_partition"]) != part or int(record["below_offset"]) < 0:
        raise ValueError(f"a Purge of txlog/{record['txlog_partition']} below "
                         f"{record['below_offset']} in purges/{part}")
    if len(peer.encode()) > MAX_ID_BYTES or "\x00" in peer:
        raise ValueError(f"peer id longer than {MAX_ID_BYTES} bytes or with a NUL")
    return Event(PURGE, int(record["below_offset"]), int(record["timestamp_ms"]))


def _peer_of(key: Any) -> str | None:
    if key is None or len(key) == 0:
        return None
    try:
        return bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        return None


def apply_batch(maps: StateMaps, events: Mapping[str, list[Event]],
                ttl: Ttl) -> dict[str, list[Change]]:
    """Apply each peer's events (in offset order) to the state in ``maps``; net changes.

    Reads, in one batched call: the metas of the peers and the entries the events name (plus
    a full scan of the group only when a peer is purged); then, only when some memory is due
    to expire, the due expiry chunks and their ids. Writes every changed row once, at the
    end. A peer's meta is kept even when it holds nothing else (one small row per peer ever
    seen): its log clock must never go back.
    """
    peers = sorted(events)
    wanted = [(p, m) for p in peers
              for m in sorted({e.message_id for e in events[p] if e.kind != PURGE})]
    values = maps.get_many([meta_key(p) for p in peers] + [entry_key(p, m) for p, m in wanted])
    metas = {p: meta_of(v) for p, v in zip(peers, values, strict=False)}
    found: dict[_Id, Entry | None] = {
        k: entry_of(v) for k, v in zip(wanted, values[len(peers):], strict=True)}
    purged = {p for p in peers if any(e.kind == PURGE for e in events[p])}
    if purged:
        for key, value in maps.scan():
            where = split_entry_key(key)
            if where is not None and where[0] in purged:
                entry = entry_of(value)
                if entry is not None and entry.queued:
                    found.setdefault(where, entry)
    by_peer: dict[str, dict[str, Entry | None]] = {p: {} for p in peers}
    for (p, m), entry in found.items():
        by_peer[p][m] = entry
    changes: dict[str, list[Change]] = {}
    entry_w: dict[_Id, Entry | None] = {}
    chunk_w: dict[_ChunkId, Chunk | None] = {}
    new_meta: dict[str, PeerMeta] = {}
    for p in peers:
        plan = plan_events(metas[p], by_peer[p], events[p], ttl)
        changes[p] = plan.changes
        entry_w.update(((p, m), e) for m, e in plan.writes.items())
        chunk_w.update(((p, c, s), chunk) for c, s, chunk in plan.chunks)
        new_meta[p] = plan.meta
    _expire(maps, new_meta, found, entry_w, chunk_w)
    puts = [(entry_key(*k), entry_value(e)) for k, e in entry_w.items() if e is not None]
    puts += [(chunk_key(*k), chunk_value(c)) for k, c in chunk_w.items() if c is not None]
    # A peer's meta stays even when it holds nothing: its clock must never go back.
    puts += [(meta_key(p), meta_value(m)) for p, m in new_meta.items() if m != metas[p]]
    maps.put_many(puts)
    maps.remove_many([entry_key(*k) for k, e in entry_w.items() if e is None]
                     + [chunk_key(*k) for k, c in chunk_w.items() if c is None])
    return changes


def _expire(maps: StateMaps, metas: dict[str, PeerMeta], found: dict[_Id, Entry | None],
            entry_w: dict[_Id, Entry | None], chunk_w: dict[_ChunkId, Chunk | None]) -> None:
    """Pop due expiry chunks; record the deletions in ``entry_w``/``chunk_w``, new metas in
    ``metas`` (the reads see this batch's writes first)."""
    keys = [(p, c, s) for p, meta in metas.items() for c, s in expiry_chunks(meta)]
    if not keys:
        return
    unread = [k for k in keys if k not in chunk_w]
    chunks: dict[_ChunkId, Chunk | None] = {
        k: chunk_of(v) for k, v in zip(unread, maps.get_many([chunk_key(*k) for k in unread]),
                                       strict=True)}
    chunks.update((k, chunk_w[k]) for k in keys if k in chunk_w)
    of_peer: dict[str, dict[tuple[int, int], Chunk | None]] = {}
    for (p, c, s), chunk in chunks.items():
        of_peer.setdefault(p, {})[(c, s)] = chunk
    ids = {p: expiry_reads(metas[p], of_peer[p]) for p in of_peer}
    known = {**found, **entry_w}
    unknown = [(p, m) for p in ids for m in ids[p] if (p, m) not in known]
    values = maps.get_many([entry_key(*k) for k in unknown])
    known.update(zip(unknown, map(entry_of, values), strict=True))
    for p, mine in of_peer.items():
        plan = plan_expiry(metas[p], mine, {m: known.get((p, m)) for m in ids[p]})
        entry_w.update(((p, m), None) for m in plan.deletes)
        chunk_w.update(((p, c, s), None) for c, s in plan.chunk_deletes)
        metas[p] = plan.meta


_READERS: dict[int, RecordReader] = {}


def process_rows(rows: pd.DataFrame, maps: StateMaps, ttl: Ttl,
                 codec: Codec | None = None,
                 admission: TxlogAdmission | None = None) -> pd.DataFrame:
    """Apply a batch's txlog rows (any order, one or more txlog partitions) to the state.

    ``admission`` (the job's environment and signature checks; None: every record is
    applied) refuses records before they reach the state. Returns the output rows
    (:data:`OUTPUT_SCHEMA`).
    """
    codec = codec or default_codec()
    reader = _READERS.get(id(codec))
    if reader is None or reader.codec is not codec:
        reader = _READERS[id(codec)] = RecordReader(codec, (SEND, ACK, PURGE, FAIL))
        # (an AckBatch is not flat: the codec decodes it, once per batch of acks)
    purges = None
    if "purge" in rows and rows["purge"].any():
        purges, rows = rows[rows["purge"]], rows[~rows["purge"]]
    rows = rows.sort_values(["partition", "offset"], kind="stable")
    out: list[tuple[Any, ...]] = []
    events: dict[str, list[Event]] = {}
    where: dict[tuple[str, int], int] = {}  # (peer, txlog offset) -> txlog partition
    purged: dict[str, bytes] = {}  # peer -> its last Purge of the batch
    for source in ((rows, False), (purges, True)) if purges is not None else ((rows, False),):
        frame, from_purges = source
        for key, value, part, off in zip(frame["key"], frame["value"], frame["partition"],
                                         frame["offset"], strict=True):
            part, off = int(part), int(off)
            peer = _peer_of(key)
            try:
                decoded = reader.decode(None if value is None else bytes(value))
                if admission is not None and value is not None:
                    refused = admission.check(decoded.name, decoded.record, bytes(value))
                    if refused is not None:
                        out.append((REFUSED[refused.kind],
                                    bytes(key) if key is not None and len(key) else None,
                                    bytes(value), part, off, refused.reason, int(from_purges)))
                        continue
                found = ([_purge_event(peer, decoded.name, decoded.record, part)]
                         if from_purges else _events(peer, decoded.name, decoded.record, off))
            except (CodecError, ValueError, KeyError, TypeError, AttributeError) as exc:
                out.append((DEAD, bytes(key) if key is not None and len(key) else None,
                            None if value is None else bytes(value), part, off,
                            f"{type(exc).__name__}: {exc}", int(from_purges)))
                continue
            assert peer is not None
            if from_purges:
                purged[peer] = bytes(value)
                where.setdefault((peer, found[0].offset), part)
                # at its position among the peer's txlog events: after the Sends below it
                mine = events.setdefault(peer, [])
                mine.append(found[0])
                mine.sort(key=lambda e: (e.offset, e.kind != PURGE))
                continue
            events.setdefault(peer, []).extend(found)
            where[(peer, off)] = part
    changes = apply_batch(maps, events, ttl) if events else {}
    sends: dict[int, bytes] | None = None  # txlog offset -> Send bytes, built for letters
    for peer in sorted(changes):
        last_part = where[(peer, events[peer][-1].offset)]
        for change in changes[peer]:
            qkey = queue_key(peer, change.message_id).encode()
            for letter in change.letters:
                if sends is None:
                    sends = {int(o): bytes(v) for o, v in zip(rows["offset"], rows["value"],
                                                              strict=True) if v is not None}
                part = where.get((peer, letter.fail_offset), last_part)  # one partition a peer
                out.append((LETTER, qkey, sends.get(letter.send_offset)
                            if letter.send is not None else None, part, letter.send_offset,
                            letter.reason, letter.delivery_count))
            if change.upsert and change.send is not None:
                send = change.send
                rec = send.record or {}
                part = where[(peer, send.offset)]
                value = codec.encode("QueueEntry", {
                    "peer": peer, "message_id": change.message_id, "sender": rec["sender"],
                    "message_type": rec["message_type"], "payload": rec["payload"],
                    "timestamp_ms": send.timestamp_ms, "txlog_partition": part,
                    "txlog_offset": send.offset, "delivery_count": change.delivery_count})
                out.append((ENTRY, qkey, value, part, send.offset, None, change.delivery_count))
            elif change.upsert:  # a new count for a Send of an earlier batch: sink reads it
                out.append((ENTRY, qkey, None, last_part, change.send_offset, None,
                            change.delivery_count))
            else:
                out.append((TOMBSTONE, qkey, None, last_part, -1, None, 0))
    # each applied Purge after the peer's tombstones: in its queues partition, a reader that
    # sees the Purge has seen them
    for peer, value in sorted(purged.items()):
        last = next(e.offset for e in reversed(events[peer]) if e.kind == PURGE)
        out.append((PURGED, purge_key(peer).encode(), value, where[(peer, last)], -1, None, 0))
    if len(rows):  # txlog rows only: a purges offset is no txlog position
        for part, top in rows.groupby("partition")["offset"].max().items():
            out.append((MARK, None, None, int(part), int(top), None, 0))
    import pandas as pd
    frame = pd.DataFrame(out, columns=_COLUMNS)
    return frame.astype({"partition": "int32", "offset": "int64", "count": "int32"})
