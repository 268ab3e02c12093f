"""The log API against the real cluster: partitioning, dead letters, oversized records."""

from __future__ import annotations

import pytest

from tests.support import wait_for
from tidemark.log.consumer import DeadLetterWriter, LogConsumer, decode_or_deadletter, read_to_end
from tidemark.log.exceptions import OversizedMessageError
from tidemark.log.offsets import end_offsets
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.topics import check_replication, describe_topics
from tidemark.log.wire import default_codec

pytestmark = pytest.mark.integration


def _read_all(settings: Settings, topic: str, partitions: int) -> list:
    return [m for msgs in read_to_end(settings, topic, range(partitions), timeout_s=60)
            for m in msgs]


def test_topics_are_durable(fresh_settings: Settings) -> None:
    info = describe_topics(fresh_settings)
    assert set(info) == {fresh_settings.topic(t) for t in
                         ("txlog", "queues", "directory", "config", "deadletter", "purges")}
    for name, row in info.items():
        assert row["replication_factor"] == 3, name
        assert row["min.insync.replicas"] == 2, name
        assert row["unclean.leader.election.enable"] == "false", name
    assert info[fresh_settings.topic("queues")]["cleanup.policy"] == "compact"
    assert info[fresh_settings.topic("directory")]["cleanup.policy"] == "compact"
    purges = info[fresh_settings.topic("purges")]  # a peer's latest Purge, for good
    assert purges["cleanup.policy"] == "compact"
    assert purges["partitions"] == info[fresh_settings.topic("txlog")]["partitions"]
    assert info[fresh_settings.topic("config")]["partitions"] == 1
    check_replication(fresh_settings)


def test_records_land_in_the_java_partition(fresh_settings: Settings) -> None:
    producer = LogProducer(fresh_settings)
    peers = [f"peer-{i}" for i in range(40)]
    for peer in peers:
        producer.produce("txlog", peer, "Purge", {"peer": peer, "environment": "t",
                                                  "timestamp_ms": 1})
    producer.flush()
    msgs = _read_all(fresh_settings, "txlog", fresh_settings.partitions)
    assert len(msgs) == len(peers)
    for msg in msgs:
        peer = msg.key().decode()
        assert msg.partition() == partition_for_peer(peer, fresh_settings.partitions), peer
        assert default_codec().decode(msg.value()).record["peer"] == peer


def test_poison_record_goes_to_deadletter(fresh_settings: Settings) -> None:
    producer = LogProducer(fresh_settings)
    producer.produce_raw(fresh_settings.topic("txlog"), "peer-1", b"not avro at all", partition=0)
    producer.produce("txlog", "peer-1", "Purge", {"peer": "peer-1", "environment": "t",
                                                  "timestamp_ms": 2}, partition=0)
    producer.flush()
    consumer = LogConsumer(fresh_settings)
    consumer.assign({("txlog", 0): 0})
    dlq = DeadLetterWriter(producer, source="test")
    decoded: list = []
    wait_for(lambda: decoded.extend(d for _, d in decode_or_deadletter(
        consumer, consumer.consume_batch(100, 0.2), dlq)) or len(decoded) + dlq.count >= 2,
        what="both records handled")
    producer.flush()
    assert [d.name for d in decoded] == ["Purge"] and dlq.count == 1
    dead = _read_all(fresh_settings, "deadletter", 3)
    assert len(dead) == 1
    headers = dict(dead[0].headers())
    assert dead[0].value() == b"not avro at all" and dead[0].key() == b"peer-1"
    assert b"marker" in headers["tidemark.reason"]
    assert headers["tidemark.offset"] == b"0"


def test_oversized_record_is_refused_before_kafka(fresh_settings: Settings) -> None:
    producer = LogProducer(fresh_settings)
    with pytest.raises(OversizedMessageError, match="exceeds max_message_bytes"):
        producer.produce("txlog", "peer-1", "Send", {
            "message_id": "big", "sender": "a", "recipient": "peer-1", "environment": "t",
            "message_type": "x", "payload": b"x" * (fresh_settings.max_message_bytes + 1),
            "timestamp_ms": 1, "delivery_count": 0})
    producer.flush()
    assert sum(end_offsets(fresh_settings, "txlog").values()) == 0
