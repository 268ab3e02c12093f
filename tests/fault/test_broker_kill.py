"""kill -9 brokers under acks=all traffic: nothing acknowledged is lost, nothing duplicated,
and with two of three brokers down a send fails loudly instead of succeeding silently."""

from __future__ import annotations

import threading

import pytest

from tests.support import wait_for
from tidemark.log.consumer import read_to_end
from tidemark.log.exceptions import DeliveryError, UnderReplicatedError
from tidemark.log.producer import LogProducer
from tidemark.log.topics import check_replication
from tidemark.log.wire import default_codec
from tidemark.stack.launcher import LocalStack

pytestmark = [pytest.mark.integration, pytest.mark.fault]


def _send(i: int) -> dict:
    return {"message_id": f"m{i}", "sender": "s", "recipient": f"peer-{i % 50}",
            "environment": "default", "message_type": "t", "payload": b"x" * 150,
            "timestamp_ms": i, "delivery_count": 0}


def _produce(producer: LogProducer, ids: range, acked: set[str], lock: threading.Lock) -> None:
    def on_delivery(err, msg):  # noqa: ANN001
        if err is None:
            with lock:
                acked.add(producer.codec.decode(msg.value()).record["message_id"])

    for i in ids:
        producer.produce("txlog", f"peer-{i % 50}", "Send", _send(i), on_delivery=on_delivery)
        if i % 500 == 0:
            producer.poll(0)
    producer.flush(120)


def _read_ids(stack: LocalStack) -> list[str]:
    decode = default_codec().decode
    return [decode(m.value()).record["message_id"]
            for msgs in read_to_end(stack.settings(), "txlog", timeout_s=90) for m in msgs]


def test_sigkill_a_broker_loses_nothing_acked(private_stack: LocalStack) -> None:
    settings = private_stack.settings()
    producer = LogProducer(settings, **{"message.timeout.ms": 60000})
    acked: set[str] = set()
    lock = threading.Lock()
    _produce(producer, range(0, 20000), acked, lock)
    assert len(acked) == 20000

    # Kill the broker leading txlog partition 0 while a second wave is in flight.
    md = producer.raw.list_topics(settings.topic("txlog"), timeout=10)
    leader = md.topics[settings.topic("txlog")].partitions[0].leader
    writer = threading.Thread(target=_produce, args=(producer, range(20000, 60000), acked, lock))
    writer.start()
    wait_for(lambda: len(acked) > 25000, what="second wave under way")
    private_stack.kill(f"broker-{leader}")
    writer.join(timeout=180)
    assert not writer.is_alive()
    # With one broker of three gone the txlog is under-replicated: the check refuses to run.
    wait_for(lambda: _refused(settings), timeout=30, what="ISR shrink")

    ids = _read_ids(private_stack)
    assert acked <= set(ids), f"lost {len(acked - set(ids))} acknowledged records"
    assert len(ids) == len(set(ids)), "idempotent producer wrote duplicates"
    assert len(acked) == 60000


def _refused(settings) -> bool:  # noqa: ANN001
    try:
        check_replication(settings)
    except UnderReplicatedError:
        check_replication(settings, allow_under_replicated=True)
        return True
    return False


def test_two_of_three_brokers_down_send_fails_clearly(private_stack: LocalStack) -> None:
    settings = private_stack.settings()
    producer = LogProducer(settings, **{"message.timeout.ms": 8000})
    producer.produce("txlog", "peer-1", "Send", _send(1))
    producer.flush()
    private_stack.kill("broker-1")
    private_stack.kill("broker-2")
    for i in range(2, 50):
        producer.produce("txlog", f"peer-{i}", "Send", _send(i))
    with pytest.raises(DeliveryError) as info:
        producer.flush(60)
    message = str(info.value)
    assert "not acknowledged by Kafka" in message and "txlog" in message
