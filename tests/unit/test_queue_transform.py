"""The job's pandas step and small pure helpers, without Spark or Kafka."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from tidemark.log.queue_state import MAX_ID_BYTES, Ttl, queue_key
from tidemark.log.registry import parse_duration_ms
from tidemark.log.settings import Settings
from tidemark.log.wire import default_codec
from tidemark.spark_streaming.checkpoint import default_checkpoint
from tidemark.spark_streaming.job import JobOptions, state_partitions
from tidemark.spark_streaming.state_layout import MemoryMaps
from tidemark.spark_streaming.transform import DEAD, ENTRY, LETTER, MARK, TOMBSTONE, process_rows
from tidemark.stack.launcher import LocalStack
from tidemark.stack.spark import plan

C = default_codec()


def _send(peer: str, mid: str) -> bytes:
    return C.encode("Send", {"message_id": mid, "sender": "s", "recipient": peer,
                             "environment": "e", "message_type": "t", "payload": b"p",
                             "timestamp_ms": 5, "delivery_count": 2})


def _ack(peer: str, mid: str) -> bytes:
    return C.encode("Ack", {"message_id": mid, "peer": peer, "environment": "e",
                            "timestamp_ms": 6})


def _frame(rows: list[tuple[bytes | None, bytes | None, int]], partition: int = 3) -> pd.DataFrame:
    data = [(k, v, partition, off) for off, (k, v, _) in enumerate(rows)]
    random.Random(1).shuffle(data)  # Spark gives no order inside a group
    return pd.DataFrame(data, columns=["key", "value", "partition", "offset"])


def test_rows_in_offset_order_per_peer_with_dead_letters_and_marks() -> None:
    maps = MemoryMaps()
    frame = _frame([
        (b"a", _send("a", "1"), 0), (b"a", _send("a", "2"), 0), (b"b", _ack("b", "9"), 0),
        (b"a", _ack("a", "1"), 0), (b"b", _send("b", "9"), 0), (b"a", b"junk", 0),
        (None, _send("a", "3"), 0), (b"b", _send("a", "4"), 0),
        (b"a", C.encode("QueueProgress", {"txlog_partition": 0, "next_offset": 1,
                                          "batch_id": 0, "timestamp_ms": 0}), 0),
        (b"a", _send("a", "x" * (MAX_ID_BYTES + 1)), 0)])
    out = process_rows(frame, maps, Ttl(1000, 500))
    entries = out[out.kind == ENTRY]
    assert list(entries.key) == [queue_key("a", "2").encode()]
    entry = C.decode(entries.value.iloc[0]).record
    assert (entry["txlog_partition"], entry["txlog_offset"], entry["delivery_count"]) == (3, 1, 2)
    assert set(out[out.kind == DEAD].offset) == {5, 6, 7, 8, 9}
    assert all(out[out.kind == DEAD].reason.str.len() > 0)
    marks = out[out.kind == MARK]
    assert list(marks.offset) == [9] and list(marks.partition) == [3]
    # one row per message: a's queued "2" and acked "1", b's early ack "9"
    assert {k: e.queued for k, e in maps.entries().items()} == {
        ("a", "1"): False, ("a", "2"): True, ("b", "9"): False}
    # the next batch acks a's entry: a tombstone; the id is remembered for the dedup window
    out2 = process_rows(_frame([(b"a", _ack("a", "2"), 0)]), maps, Ttl(0, 500))
    assert list(out2[out2.kind == TOMBSTONE].key) == [queue_key("a", "2").encode()]
    assert out2[out2.kind == TOMBSTONE].value.isna().all()
    assert not maps.entries()[("a", "2")].queued
    far = C.encode("Ack", {"message_id": "x", "peer": "a", "environment": "e",
                           "timestamp_ms": 10**6})
    process_rows(_frame([(b"a", far, 0)]), maps, Ttl(0, 0))
    # everything a remembered expired and left the state; its meta (the clock) stays
    assert [k for k in maps.entries() if k[0] == "a"] == []
    assert maps.metas()["a"].clock == 10**6
    assert maps.chunk_count("a") == 0 and maps.chunk_count("b") == 1


def _fail(peer: str, mid: str, why: str) -> bytes:
    return C.encode("DeliveryFailed", {"message_id": mid, "peer": peer, "environment": "e",
                                       "sender": "s", "message_type": "t", "reason": why,
                                       "timestamp_ms": 7})


def test_failures_update_counts_then_dead_letter_the_original_send() -> None:
    maps = MemoryMaps()
    ttl = Ttl(1000, 500, 3)
    send_a, send_b = _send("a", "1"), _send("a", "2")  # Sends carry delivery_count 2
    out = process_rows(_frame([(b"a", send_a, 0), (b"a", _fail("a", "1", "x"), 0),
                               (b"a", _fail("a", "9", "not queued"), 0)]), maps, ttl)
    # 2 + 1 failure reach the limit within the batch: no entry, a letter with the Send's bytes
    assert out[out.kind == ENTRY].empty
    assert list(out[out.kind == TOMBSTONE].key) == [queue_key("a", "1").encode()]
    letters = out[out.kind == LETTER]
    assert list(letters.value) == [send_a] and list(letters["count"]) == [3]
    assert list(letters.reason) == ["x"] and list(letters.offset) == [0]
    # a Send of an earlier batch: a count-only upsert and a letter without the bytes
    process_rows(_frame([(b"a", send_b, 0)]), maps, Ttl(1000, 500, 4))
    out = process_rows(_frame([(b"a", _fail("a", "2", "y"), 0)]), maps, Ttl(1000, 500, 4))
    (row,) = out[out.kind == ENTRY].itertuples()
    assert row.value is None and (row.offset, row.count, row.partition) == (0, 3, 3)
    out = process_rows(_frame([(b"a", _fail("a", "2", "z"), 0)]), maps, Ttl(1000, 500, 4))
    assert list(out[out.kind == TOMBSTONE].key) == [queue_key("a", "2").encode()]
    (row,) = out[out.kind == LETTER].itertuples()
    assert row.value is None and (row.offset, row.count, row.reason) == (0, 4, "z")
    assert row.key == queue_key("a", "2").encode()


def _acks(peer: str, mids: list[str]) -> bytes:
    return C.encode("AckBatch", {"message_ids": mids, "peer": peer, "environment": "e",
                                 "timestamp_ms": 6})


def test_an_ack_batch_is_the_acks_of_its_ids() -> None:
    """The same txlog with Acks, or with one AckBatch in their place, gives the same rows
    and state (an id no Send can carry is skipped); an AckBatch whose key is not its peer is
    dead-lettered whole."""
    sends = [(b"a", _send("a", m), 0) for m in "123"] + [(b"b", _send("b", "9"), 0)]
    one_by_one, batched = MemoryMaps(), MemoryMaps()
    out1 = process_rows(_frame(sends + [(b"a", _ack("a", "1"), 0), (b"a", _ack("a", "3"), 0),
                                        (b"a", _ack("a", "7"), 0)]), one_by_one, Ttl(1000, 500))
    out2 = process_rows(_frame(sends + [(b"a", _acks("a", ["1", "3", "x" * (MAX_ID_BYTES + 1),
                                                          "7"]), 0),
                                        (b"a", _acks("b", ["9"]), 0)]), batched, Ttl(1000, 500))
    assert {k: e.queued for k, e in batched.entries().items()} == {
        k: e.queued for k, e in one_by_one.entries().items()}
    assert [k for k, e in batched.entries().items() if e.queued] == [("a", "2"), ("b", "9")]
    assert list(out2[out2.kind == ENTRY].key) == list(out1[out1.kind == ENTRY].key)
    assert list(out2[out2.kind == DEAD].offset) == [5]


def test_empty_frame() -> None:
    out = process_rows(_frame([]), MemoryMaps(), Ttl())
    assert out.empty and list(out.columns) == ["kind", "key", "value", "partition", "offset",
                                               "reason", "count"]


def test_durations_checkpoint_partitions_and_plan(tmp_path) -> None:
    assert parse_duration_ms("500ms") == 500 and parse_duration_ms("2s") == 2000
    assert parse_duration_ms("24h") == 86_400_000 and parse_duration_ms("250") == 250
    with pytest.raises(ValueError):
        parse_duration_ms("soon")
    s = Settings(bootstrap="", topic_prefix="x.", partitions=12)
    assert default_checkpoint(s, str(tmp_path)) == tmp_path / "spark" / "x.checkpoint"
    assert state_partitions(s, JobOptions(checkpoint="c", master="local[2]",
                                          state_partitions=None)) == 2
    assert state_partitions(s, JobOptions(checkpoint="c", state_partitions=5)) == 5
    (spec,) = plan(LocalStack(tmp_path))
    assert spec.kind == "spark" and spec.name == "spark"
    assert spec.argv[spec.argv.index("--state-dir") + 1] == str(tmp_path)
    assert str(tmp_path) in spec.argv[spec.argv.index("--checkpoint") + 1]
    assert spec.ready_file == spec.argv[spec.argv.index("--ready-file") + 1]
    assert spec.ready_file.startswith(str(tmp_path)) and spec.ready_port is None


def test_kafka_client_settings_reach_spark_in_java_names() -> None:
    from tidemark.spark_streaming.job import kafka_options
    s = Settings(bootstrap="b:9092", client={
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca.pem"})
    opts = kafka_options(s)
    assert opts["kafka.bootstrap.servers"] == "b:9092"
    assert opts["kafka.security.protocol"] == "SASL_SSL"
    assert opts["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert opts["kafka.sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.'
                                              'ScramLoginModule required username="u"'
                                              ' password="p";')
    assert opts["kafka.ssl.truststore.location"] == "/ca.pem"
    assert "kafka.sasl.username" not in opts and "kafka.sasl.password" not in opts


def test_a_group_of_several_partitions_keeps_each_row_in_its_own_partition() -> None:
    """A state group holds txlog partitions p with the same p % groups: entries, tombstones
    and marks still name the partition their records came from."""
    maps = MemoryMaps()
    data = [(b"a", _send("a", "1"), 1, 10), (b"b", _send("b", "1"), 3, 4),
            (b"a", _send("a", "2"), 1, 11), (b"b", _ack("b", "1"), 3, 5),
            (b"c", _send("c", "7"), 5, 0)]
    random.Random(2).shuffle(data)
    out = process_rows(pd.DataFrame(data, columns=["key", "value", "partition", "offset"]),
                       maps, Ttl(1000, 500))
    entries = {k: (p, o) for k, p, o in zip(out[out.kind == ENTRY].key,
                                             out[out.kind == ENTRY].partition,
                                             out[out.kind == ENTRY].offset, strict=True)}
    assert entries == {queue_key("a", "1").encode(): (1, 10),
                       queue_key("a", "2").encode(): (1, 11),
                       queue_key("c", "7").encode(): (5, 0)}
    marks = out[out.kind == MARK]
    assert dict(zip(marks.partition, marks.offset, strict=True)) == {1: 11, 3: 5, 5: 0}
    later = [(b"c", _ack("c", "7"), 5, 1), (b"a", _ack("a", "2"), 1, 12)]
    out2 = process_rows(pd.DataFrame(later, columns=["key", "value", "partition", "offset"]),
                        maps, Ttl(1000, 500))
    tombs = out2[out2.kind == TOMBSTONE]
    assert dict(zip(tombs.key, tombs.partition, strict=True)) == {
        queue_key("a", "2").encode(): 1, queue_key("c", "7").encode(): 5}


def _failure(peer: str, mid: str, terminal: bool | None) -> bytes:
    """A DeliveryFailed; ``terminal`` None: written by an older peer (schema v2, no field)."""
    rec = {"message_id": mid, "peer": peer, "environment": "e", "sender": "s",
           "message_type": "t", "reason": "why", "timestamp_ms": 6, "signer": b"",
           "signature": b""}
    if terminal is not None:
        return C.encode("DeliveryFailed", {**rec, "terminal": terminal})
    import json

    from tidemark import schemas
    from tidemark.log.wire import Codec
    old = json.loads((schemas.SCHEMA_DIR / "history" / "DeliveryFailed.v2.avsc").read_text())
    return Codec({"DeliveryFailed": old}).encode("DeliveryFailed", rec)


def test_a_terminal_failure_dead_letters_at_once_an_older_peers_counts_one() -> None:
    maps = MemoryMaps()
    frame = _frame([(b"a", _send("a", "1"), 0), (b"a", _send("a", "2"), 0),
                    (b"a", _failure("a", "1", True), 0), (b"a", _failure("a", "2", None), 0),
                    (b"a", _failure("a", "2", False), 0)])
    out = process_rows(frame, maps, Ttl(1000, 500))
    assert list(out[out.kind == LETTER].offset) == [0]   # "1" (its Send at 0): its term
    assert {k[1]: e.delivery_count for k, e in maps.entries().items() if e.queued} == {"2": 4}  # 2 on its Send, + 2


def _purge(peer: str, partition: int, below: int) -> bytes:
    return C.encode("Purge", {"peer": peer, "environment": "e", "timestamp_ms": 7,
                              "txlog_partition": partition, "below_offset": below})


def test_a_purge_from_purges_reaches_the_sends_below_its_offset_in_any_batch() -> None:
    """The operator's Purge (a ``purges`` row) drops the Sends below the offset it reaches,
    those of earlier batches, of its own and of later ones (purges read ahead of txlog), and
    is kept in queues under the peer's purge key; a Purge in txlog is poison."""
    from tidemark.log.queue_state import purge_key
    from tidemark.spark_streaming.transform import PURGED
    maps, ttl = MemoryMaps(), Ttl(10**9, 10**9)
    process_rows(_frame([(b"a", _send("a", "0"), 0)]), maps, ttl)  # offset 0, batch 1
    frame = _frame([(b"a", _send("a", "1"), 0), (b"a", _send("a", "2"), 0)])  # 0 and 1
    frame["offset"] += 1  # txlog offsets 1 and 2
    frame["purge"] = False
    purge = pd.DataFrame([(b"a", _purge("a", 3, 4), 3, 0, True)],
                         columns=["key", "value", "partition", "offset", "purge"])
    out = process_rows(pd.concat([frame, purge], ignore_index=True), maps, ttl)
    assert set(out[out.kind == TOMBSTONE].key) == {queue_key("a", "0").encode()}
    kept = out[out.kind == PURGED]
    assert list(kept.key) == [purge_key("a").encode()] and list(kept.partition) == [3]
    assert C.decode(kept.value.iloc[0]).record["below_offset"] == 4
    assert list(out[out.kind == MARK].offset) == [2]  # txlog's only: 0 is a purges offset
    late = _frame([(b"a", _send("a", "3"), 0), (b"a", _send("a", "4"), 0)])
    late["offset"] += 3  # offsets 3 (below the Purge: dropped) and 4 (after it: queued)
    out = process_rows(late, maps, ttl)
    assert list(out[out.kind == ENTRY].key) == [queue_key("a", "4").encode()]
    assert {m for (p, m), e in maps.entries().items() if e.queued} == {"4"}
    in_txlog = process_rows(_frame([(b"a", C.encode("Purge", {
        "peer": "a", "environment": "e", "timestamp_ms": 8}), 0)]), maps, ttl)
    assert list(in_txlog.kind) == [DEAD, MARK]
    assert "a Purge record does not belong in txlog" in in_txlog.reason.iloc[0]


def test_a_purge_row_that_does_not_match_its_partition_is_poison_from_purges() -> None:
    maps = MemoryMaps()
    purge = pd.DataFrame([(b"a", _purge("a", 1, 4), 3, 0, True),
                          (b"b", _send("b", "x"), 3, 1, True)],
                         columns=["key", "value", "partition", "offset", "purge"])
    out = process_rows(purge, maps, Ttl(1000, 500))
    dead = out[out.kind == DEAD]
    assert len(dead) == 2 and set(dead["count"]) == {1}  # 1: from purges (the sink's header)
    assert maps.entries() == {}
