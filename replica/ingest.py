"""Ingest: consume the owned txlog and queues partitions and apply them to the store.

Each step consumes a batch and applies it in one LevelDB write batch (records, indexes,
interval map, position). Positions live in the store, never in Kafka. A record that cannot
be decoded goes to ``deadletter`` (flushed before the batch is written; a copy Kafka refuses,
e.g. an oversized value, goes to the store's dead-letter ledger in the same batch, see
:mod:`tidemark.replica.deadletter`) and its offset still counts as applied. A jump in txlog offsets
below the Kafka log start leaves a gap in the interval map for backfill; holes above it
(non-data offsets) count as consumed.
``queues`` is compacted, so its map records consumer positions, holes included, and a
partition not read for longer than ``delete.retention.ms`` is rebuilt from a full read.

A txlog record the node's :class:`~tidemark.gossip.txlog_admission.TxlogAdmission` refuses
(another environment's; in secure mode an Ack, AckBatch, Purge or DeliveryFailed not signed
by who may write it) is neither stored nor indexed: it goes to ``deadletter`` with the
reason, like a poison record, and is counted by refusal kind (:attr:`Ingestor.refused`).
A Send of the node's environment and a well-formed AckBatch take the scanners' fast path
(the AckBatch's environment, signer and signature read by
:func:`~tidemark.log.wire.admission_scanner` and checked as a decoded one would be); the
other kinds, and an AckBatch the check refuses, are decoded and checked.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Callable, Iterable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from tidemark.gossip.txlog_admission import TxlogAdmission
from tidemark.log import clock
from tidemark.log.consumer import LogConsumer
from tidemark.log.exceptions import CodecError, LogError
from tidemark.log.queue_state import purge_key
from tidemark.log.settings import Settings
from tidemark.log.wire import (
    ACK,
    PURGE,
    SEND,
    AckBatchFields,
    ack_batch_header,
    admission_scanner,
    default_codec,
    encode_row,
    txlog_scanners,
)
from tidemark.replica import queue_index
from tidemark.replica.ack_ranges import put_acks, record_span
from tidemark.replica.batch import Batch
from tidemark.replica.deadletter import DeadLetters
from tidemark.replica.keys import (
    ack_key,
    ack_prefix,
    deadletter_key,
    progress_key,
    purge_prefix,
    tp_name,
)
from tidemark.replica.store import Store

__all__ = ["Ingestor", "index_txlog", "index_purge", "REFUSED_PREFIX", "PURGE_IN_TXLOG"]

log = logging.getLogger(__name__)
_Q = struct.Struct(">Q")
TOPICS = ("txlog", "queues")
#: At most this often a step also refreshes the watermarks and, when it found no records,
#: moves positions over trailing holes (a few dozen microseconds per owned partition).
BOOKKEEPING_S = 0.01
_FATAL_CODES = {KafkaError._AUTHENTICATION, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}


#: A dead-letter reason of a refused record starts ``refused (<kind>): ``.
REFUSED_PREFIX = "refused ("
#: The dead-letter reason of a Purge appended to txlog (only the operator may purge, through
#: the ``purges`` topic).
PURGE_IN_TXLOG = "a Purge belongs in the purges topic (the operator's), not in txlog"


def index_txlog(batch: Batch, partition: int, offset: int, value: bytes | None,
                decode: Callable = default_codec().decode,
                admission: TxlogAdmission | None = None) -> str | None:
    """Put one txlog record and its index entries into ``batch``; returns a dead-letter
    reason instead when the record is not a valid Send/Ack/AckBatch/Purge/DeliveryFailed,
    or ``admission`` refuses it (``refused (<kind>): <why>``)."""
    try:
        dec = decode(value)
    except CodecError as exc:
        return str(exc)
    name, rec = dec.name, dec.record
    if value is None:
        return "record without a value"
    if admission is not None:
        refused = admission.check(name, rec, value)
        if refused is not None:
            return f"{REFUSED_PREFIX}{refused.kind}): {refused.reason}"
    if name == "Send":
        batch.put_record(partition, offset, value)
    elif name == "Ack":
        batch.put_record(partition, offset, value)
        batch.wb.put(ack_key(partition, rec["peer"], rec["message_id"]), _Q.pack(offset))
    elif name == "AckBatch":  # one index entry per id, or one for its range
        batch.put_record(partition, offset, value)
        put_acks(batch.wb.put, partition, offset, rec["peer"].encode(),
                 _utf8_all(rec["message_ids"]), record_span(rec))
    elif name == "Purge":
        return PURGE_IN_TXLOG
    elif name == "DeliveryFailed":  # a handler failure: kept like the Sends it counts
        batch.put_record(partition, offset, value)
    else:
        return f"unexpected {name} record in txlog"
    return None


def _utf8_all(ids: list[str]) -> list[bytes]:
    """``ids`` encoded, in C when no id holds NUL (one join, one encode, one split)."""
    joined = "\0".join(ids).encode()
    if joined.count(b"\0") == len(ids) - 1:
        return joined.split(b"\0")
    return [mid.encode() for mid in ids]


def index_purge(batch: Batch, partition: int, peer: str, below: int, came_ms: int) -> None:
    """Put the Purge index entry of a Purge of ``peer`` reaching the Sends below txlog
    offset ``below`` into ``batch``: ``U k peer NUL <below>`` -> when it came (ms; GC serves
    it with the sweep that starts after that, :mod:`tidemark.replica.release_policy`)."""
    batch.wb.put(purge_prefix(partition) + peer.encode() + b"\0" + _Q.pack(below),
                 _Q.pack(came_ms))


class Ingestor:
    """Consumes the owned partitions of txlog and queues into a :class:`Store`."""

    def __init__(self, settings: Settings, store: Store, node_id: str = "replica",
                 batch_size: int = 20000, sync: bool = False,
                 admission: TxlogAdmission | None = None) -> None:
        self.settings = settings
        #: what txlog records the node applies (None: all, as before admission existed)
        self.admission = admission
        #: this environment's Sends take the fast path; other kinds are decoded and checked
        self._own_env = settings.environment.encode() if admission is not None else None
        #: records refused by the admission, by kind (``environment``, ``signature``)
        self.refused: dict[str, int] = {"environment": 0, "signature": 0}
        self.on_refused: Callable[[str, int], None] = lambda kind, n: None
        self.store = store
        self.node_id = node_id
        self.batch_size = batch_size
        self.sync = sync
        self.codec = default_codec()
        self.consumer = LogConsumer(settings, None, **{
            "queued.min.messages": 50000, "queued.max.messages.kbytes": 16384,
            "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 2 << 20,
            "fetch.wait.max.ms": 500})
        self._physical = {settings.topic(t): t for t in TOPICS}
        self._scanners = txlog_scanners(self.codec)
        self._batch_scan = ack_batch_header(self.codec) or (b"", lambda v: None)
        self._admission_scan = admission_scanner(
            list(self.codec.schema("AckBatch")["fields"])) if admission is not None else None
        self.deadletters = DeadLetters(settings, f"replica:{node_id}")
        self.on_poison: Callable[[int], None] = lambda n: None  # e.g. a metrics counter
        #: the seconds one consumed batch took to apply, commit included (once per batch)
        self.on_batch: Callable[[float], object] = lambda seconds: None
        self.partitions: list[int] = []
        self.high: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.caught_up_ms: dict[str, int] = {}
        self.applied = 0
        self.backlog_steps = 0  # consecutive steps that consumed a full batch (catching up)
        self.poison = 0
        self._bookkeeping_due = 0.0  # monotonic time of the next _idle / _refresh_high
        self.queues_delete_retention_ms = settings.queues_delete_retention_ms

    # ---- assignment ------------------------------------------------------------------------
    def assign(self, partitions: Iterable[int]) -> None:
        """(Re)assign the owned log partitions, resuming from the stored positions."""
        self.partitions = sorted(set(partitions))
        positions: dict[tuple[str, int], int] = {}
        now = clock.now_ms()
        for k in self.partitions:
            for topic in TOPICS:
                pos = self.store.position(topic, k)
                if topic == "queues" and pos is not None:
                    age = now - self.store.applied_ms.get((topic, k), 0)
                    lo = self._low(topic, k)
                    if age > self.queues_delete_retention_ms or pos < lo < 1 << 62:
                        log.warning("queues/%d: last read %.0f s ago (delete.retention.ms %d) "
                                    "or behind the log start; rebuilding from a full read",
                                    k, age / 1000, self.queues_delete_retention_ms)
                        self.store.reset_queues(k)
                        pos = None
                positions[(topic, k)] = pos if pos is not None else OFFSET_BEGINNING
        self.consumer.assign(positions)

    def _cached_low(self, topic: str, k: int) -> int:
        """The log start librdkafka took from the latest fetch response (no broker call);
        when it is unknown, :meth:`_low` asks the broker. The log start only rises and the
        fetch that delivered a record updated it first, so a cached value at or below the
        position means the skipped offsets were still in the log: holes, not a gap."""
        lo, _ = self.consumer.raw.get_watermark_offsets(
            TopicPartition(self.settings.topic(topic), k), cached=True)
        if lo is None or lo < 0:
            return self._low(topic, k)
        self.low[tp_name(topic, k)] = lo
        return lo

    def _low(self, topic: str, k: int) -> int:
        """The partition's log start; if Kafka cannot tell, an offset no gap is below (so
        a jump is kept as a gap: the node stalls rather than claim offsets it lacks)."""
        try:
            lo, _ = self.consumer.raw.get_watermark_offsets(
                TopicPartition(self.settings.topic(topic), k), timeout=10, cached=False)
        except KafkaException as exc:
            log.warning("%s/%d: log start unknown (%s)", topic, k, exc.args[0].str())
            return 1 << 62
        self.low[tp_name(topic, k)] = lo
        return lo

    # ---- one step --------------------------------------------------------------------------
    def step(self, timeout: float = 0.2) -> int:
        """Consume and apply one batch; returns the number of records consumed."""
        started_ms = clock.now_ms()
        msgs = self.consumer.consume_ready(self.batch_size, timeout)
        self.backlog_steps = self.backlog_steps + 1 if len(msgs) >= self.batch_size // 2 else 0
        applied = 0
        if msgs:
            started = time.perf_counter()
            applied = self._apply(msgs)
            self.on_batch(time.perf_counter() - started)
        now = time.monotonic()
        if now >= self._bookkeeping_due:  # not on every step: hundreds a second under load
            self._bookkeeping_due = now + BOOKKEEPING_S
            if not msgs:
                self._idle()
            self._refresh_high(started_ms)
        return applied

    def _start_after_jump(self, topic: str, k: int, expected: int, offset: int) -> int:
        """Where the applied run restarts when ``offset`` follows ``expected``: below the
        log start the skipped offsets are a gap; above it they are holes (counted)."""
        if topic != "txlog":
            return expected
        lo = self._cached_low(topic, k)
        if lo <= expected:
            return expected
        log.warning("txlog/%d: log start %d passed position %d; gap [%d, %d) left for backfill",
                    k, lo, expected, expected, min(lo, offset))
        return min(lo, offset)

    def _admitted_batch(self, value: bytes) -> AckBatchFields | None:
        """What the AckBatch scanner reads of ``value`` when the admission lets it in; None
        (the full decode then applies or dead-letters it, and says why) when it does not, or
        the value is not one the scanner vouches for."""
        scan, admission = self._admission_scan, self.admission
        got = scan(value) if scan is not None else None
        if got is None or admission is None or admission.check("AckBatch", got[1], value):
            return None
        return got[0]

    def _apply(self, msgs: list) -> int:
        """Apply one consumed batch in one write batch. Records arrive in runs per
        partition; the per-run state (interval-map run, key prefixes) changes only when the
        partition changes or an offset jumps, and each txlog value is only scanned
        (:mod:`tidemark.log.wire.scanners`), falling back to the full decode when the scan fails."""
        batch = self.store.batch(self.sync)
        batch.applied_ms = clock.now_ms()
        runs: dict[tuple[str, int], list[int]] = {}
        physical, put, qpack, scanners = self._physical, batch.wb.put, _Q.pack, self._scanners
        batch_head, scan_batch = self._batch_scan
        admitted = self._admitted_batch
        put_record = batch.put_record
        decode = self.codec.decode
        admission, own_env = self.admission, self._own_env
        poison: list[tuple[Message, str]] = []
        run: list[int] | None = None
        cur_phys, cur_k, nxt, applied = "", -1, -1, 0
        txlog, aprefix = False, b""
        for msg in msgs:
            if msg.error() is not None:
                self._consumer_error(msg.error())
                continue
            applied += 1
            phys, k, off = msg.topic(), msg.partition(), msg.offset()
            if off != nxt or k != cur_k or phys != cur_phys:
                if run is not None:
                    run[1] = nxt
                topic = physical[phys]
                key = (topic, k)
                run = runs.get(key)
                expected = run[1] if run is not None else (self.store.position(topic, k) or 0)
                if off < expected:  # already applied (a re-delivery)
                    run, cur_k, nxt = None, -1, -1
                    continue
                if run is not None and off != run[1]:
                    batch.advance(topic, k, run[0], run[1])
                    run = None
                if run is None:
                    start = expected if off == expected else self._start_after_jump(
                        topic, k, expected, off)
                    run = runs[key] = [start, off]
                cur_phys, cur_k = phys, k
                txlog = topic == "txlog"
                aprefix = ack_prefix(k)
            nxt = off + 1
            value = msg.value()
            if txlog:
                entry = scanners.get(value[:10]) if value is not None else None
                if entry is not None and (own_env is None or entry[0] == SEND):
                    part = entry[1](value)
                    if part is not None and (own_env is None or part == own_env):
                        if entry[0] == PURGE:  # refused: a Purge belongs in purges
                            poison.append((msg, PURGE_IN_TXLOG))
                            continue
                        put_record(k, off, value)
                        if entry[0] == ACK:
                            put(aprefix + part, qpack(off))
                        continue
                elif value is not None and value[:10] == batch_head:
                    fields = scan_batch(value) if admission is None else admitted(value)
                    if fields is not None:  # an AckBatch: one key per id, or for its range
                        put_record(k, off, value)
                        put_acks(put, k, off, fields[1], fields[2], fields[4])
                        continue
                reason = index_txlog(batch, k, off, value, decode, admission)
            else:
                reason = self._apply_queue(batch, k, msg.key(), value)
            if reason is not None:
                poison.append((msg, reason))
        if run is not None:
            run[1] = nxt
        for (topic, k), (a, b) in runs.items():
            batch.advance(topic, k, a, b)
        if poison:
            for msg, reason in poison:
                log.warning("poison record %s[%d]@%d to deadletter: %s", msg.topic(),
                            msg.partition(), msg.offset(), reason)
            for refused in self.deadletters.send(poison):  # copies Kafka did not take
                refused["topic"] = physical.get(refused["topic"], refused["topic"])
                put(deadletter_key(refused["topic"], refused["partition"], refused["offset"]),
                    json.dumps(refused, sort_keys=True).encode())
            kinds = [r.split(")", 1)[0][len(REFUSED_PREFIX):] for _, r in poison
                     if r.startswith(REFUSED_PREFIX)]
            for kind in set(kinds):
                n = kinds.count(kind)
                self.refused[kind] = self.refused.get(kind, 0) + n
                self.on_refused(kind, n)
            self.poison += len(poison) - len(kinds)
            self.on_poison(len(poison) - len(kinds))
        batch.commit()
        self.applied += applied
        return applied

    @staticmethod
    def _consumer_error(err: KafkaError) -> None:
        """Transient consumer errors are skipped (librdkafka retries); fatal ones raise."""
        if err.code() in _FATAL_CODES or err.fatal():
            raise LogError(f"consumer error: {err.str()}")

    def _apply_queue(self, batch: Batch, k: int, key: bytes | None,
                     value: bytes | None) -> str | None:
        if value is None:
            if key is not None:
                queue_index.delete_entry(batch, k, key)  # the entry and its index entry
            return None
        try:
            dec = self.codec.decode(value)
        except CodecError as exc:
            return str(exc)
        if dec.name == "QueueEntry":
            if key is None:
                return "queue entry without a key"
            rec = dec.record
            queue_index.put_entry(batch, k, key, value, rec["peer"], rec["txlog_offset"],
                                  encode_row(rec))
        elif dec.name == "QueueProgress":
            batch.wb.put(progress_key(k), value)
        elif dec.name == "Purge":
            return self._apply_purge(batch, k, key, dec.record, value)
        else:
            return f"unexpected {dec.name} record in queues"
        return None

    def _apply_purge(self, batch: Batch, k: int, key: bytes | None, rec: dict,
                     value: bytes) -> str | None:
        """An operator's Purge the queues job applied (kept in queues under the peer's
        :func:`~tidemark.log.queue_state.purge_key`): the Purge index entry of the offset it
        reaches, valued with when it came (a GC sweep that started after that serves it)."""
        peer = str(rec["peer"])
        if key is None or key.decode("utf-8", "replace") != purge_key(peer):
            return f"a Purge of {peer!r} under queues key {key!r}"
        if rec["txlog_partition"] != k or rec["below_offset"] < 0:
            return (f"a Purge of txlog/{rec['txlog_partition']} below {rec['below_offset']}"
                    f" in queues/{k}")
        if self.admission is not None:
            refused = self.admission.check("Purge", rec, value)
            if refused is not None:
                return f"{REFUSED_PREFIX}{refused.kind}): {refused.reason}"
        index_purge(batch, k, peer, rec["below_offset"], batch.applied_ms)
        return None

    def _idle(self) -> None:
        """No records: move positions over trailing holes; refresh stale applied times."""
        tps = [TopicPartition(self.settings.topic(t), k) for k in self.partitions for t in TOPICS]
        if not tps:
            return
        now = clock.now_ms()
        batch = self.store.batch(self.sync)
        batch.applied_ms = now
        touched = False
        for tp in self.consumer.raw.position(tps):
            topic = self._physical[tp.topic]
            stored = self.store.position(topic, tp.partition)
            if tp.offset < 0:
                continue
            if stored is None or tp.offset > stored:
                start = self._start_after_jump(topic, tp.partition, stored or 0, tp.offset)
                batch.advance(topic, tp.partition, start, tp.offset)
                touched = True
            elif now - self.store.applied_ms.get((topic, tp.partition), 0) > 60_000:
                batch.advance(topic, tp.partition, stored, stored)
                touched = True
        if touched:
            batch.commit()

    def _refresh_high(self, started_ms: int) -> None:
        for k in self.partitions:
            for topic in TOPICS:
                lo, hi = self.consumer.raw.get_watermark_offsets(
                    TopicPartition(self.settings.topic(topic), k), cached=True)
                name = tp_name(topic, k)
                if hi is not None and hi >= 0:
                    self.high[name] = max(hi, self.high.get(name, 0))
                    if lo is not None and lo >= 0:
                        self.low[name] = lo
                    # txlog: the base end (what the cut uses), never the position, which
                    # may sit past a gap; queues: the position (holes count as consumed).
                    done = (self.store.map(topic, k).base_end if topic == "txlog"
                            else self.store.position(topic, k) or 0)
                    if done >= hi:
                        # Conservative: the cached watermark may be up to one fetch old.
                        self.caught_up_ms[name] = started_ms - 1000

    def has_slack(self) -> bool:
        """Whether ingest keeps up (its last steps did not consume full batches): GC may
        then take a larger share of the time."""
        return self.backlog_steps < 2

    def close(self) -> None:
        """Close the consumer and flush any dead letters."""
        self.deadletters.close()
        self.consumer.close()
