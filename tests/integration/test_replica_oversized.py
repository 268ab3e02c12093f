"""A poison record larger than the dead-letter topic accepts (2 MB in txlog, whose own
max.message.bytes this test raises) must not crash-loop the replica: the node keeps
running, the cut passes the record, and a truncated copy with the reason and the original
size is in ``deadletter``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.replicas import ends, replica_stack, status, txlog_ust
from tests.support import generate_load, wait_for
from tidemark.log.consumer import LogConsumer
from tidemark.log.wire import default_codec

pytestmark = pytest.mark.integration
BIG = 8 << 20


def _raise_txlog_limit(settings) -> None:  # type: ignore[no-untyped-def]
    """Let this test's txlog take records up to 8 MB (deadletter keeps the default)."""
    admin = AdminClient(settings.admin_config())
    res = ConfigResource(ConfigResource.Type.TOPIC, settings.topic("txlog"), incremental_configs=[
        ConfigEntry("max.message.bytes", str(BIG),
                    incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(60)


def test_oversized_poison_record_is_dead_lettered_truncated(bootstrap: str,
                                                            tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "1x1") as stack:
        settings = stack.settings()
        _raise_txlog_limit(settings)
        good = default_codec().encode("Send", {
            "message_id": "big", "sender": "a", "recipient": "peer-x", "environment": "default",
            "message_type": "t", "payload": b"x" * (2 << 20), "timestamp_ms": 1,
            "delivery_count": 0})
        poison = good + b"junk"  # a 2 MB Send with trailing bytes: the codec rejects it
        producer = Producer(settings.producer_config(**{"message.max.bytes": BIG}))
        producer.produce(settings.topic("txlog"), poison, b"peer-x", partition=0)
        assert producer.flush(60) == 0
        generate_load(settings, peers=10, messages=300, seed=21)
        target = ends(stack)
        wait_for(lambda: txlog_ust(status(stack)) == target, 90, what="cut past the 2 MB poison")
        node = next(p for p in stack.processes("replica") if p.name == "p0r0")
        assert stack.alive(node)

        consumer = LogConsumer(settings)
        consumer.assign({("deadletter", p): -2 for p in range(3)})
        found: list = []

        def copy():  # type: ignore[no-untyped-def]
            found.extend(consumer.consume_batch(100, 0.5))
            return next((m for m in found if dict(m.headers() or []).get("tidemark.offset")
                         == b"0"), None)
        msg = wait_for(copy, 30, what="the truncated copy in deadletter")
        consumer.close()
        headers = dict(msg.headers())
        assert b"trailing bytes after the Send body" in headers["tidemark.reason"]
        assert headers["tidemark.truncated"] == str(len(poison)).encode()
        assert headers["tidemark.sha256"] == hashlib.sha256(poison).hexdigest().encode()
        assert len(msg.value()) <= settings.max_message_bytes
        assert poison.startswith(msg.value()) and len(msg.value()) > 0
        assert msg.key() == b"peer-x"
        doc = status(stack)
        assert doc is not None and doc.get("deadletter_ledger", []) == []
