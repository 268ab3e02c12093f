"""Delivery counts and dead-letter through the real queues job (Spark local mode, real Kafka).

DeliveryFailed records are appended to txlog exactly as the peer library appends them (key =
the failing peer). With ``TIDEMARK_DELIVERY_LIMIT=3`` the job must publish the count on the
queue entry after each failure, then at the third tombstone the entry and write the original
Send's bytes to ``deadletter`` with count, reason, peer and txlog offset headers; ``tidemark
deadletter list --json`` (a subprocess) shows it beside a poison record, and ``tidemark
deadletter replay`` queues it again exactly once with count 0. The job's ``/metrics``
(``TIDEMARK_QUEUES_METRICS_PORT``) then counts the batches and rows it read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import converge, expected_queues, sealed, tidemark_cli
from tidemark.log.consumer import read_to_end
from tidemark.log.producer import LogProducer
from tidemark.log.queue_state import is_progress_key, queue_key
from tidemark.log.settings import Settings
from tidemark.log.wire import default_codec
from tidemark.spark_streaming.depth import read_queues
from tidemark.stack.processes import free_ports
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(420)]

LIMIT = 3
PEER = "dl-b"
C = default_codec()
TOPIC_LETTER, PARTITIONS = "d", 2  # the settings fixture
METRICS_PORT = free_ports(1)[0]
JOB_ENV = {"TIDEMARK_DELIVERY_LIMIT": str(LIMIT),  # the job fixture
           "TIDEMARK_QUEUES_METRICS_PORT": str(METRICS_PORT)}


def _entries(settings: Settings) -> dict[str, dict | None]:
    """The compacted view of queues: key -> latest QueueEntry record (None: tombstoned)."""
    out: dict[str, dict | None] = {}
    for batch in read_to_end(settings, "queues"):
        for msg in batch:
            key = (msg.key() or b"").decode()
            if not is_progress_key(key):
                out[key] = None if msg.value() is None else C.decode(msg.value()).record
    return out


def _letters(settings: Settings) -> list[tuple[bytes | None, bytes | None, dict[str, str]]]:
    return [(m.key(), m.value(), {k: (v or b"").decode() for k, v in (m.headers() or [])})
            for batch in read_to_end(settings, "deadletter") for m in batch]


def _scrape_until_counted(port: int, timeout: float = 30.0) -> dict[str, float]:
    """The job's unlabelled samples once it counted a batch (Spark's listener bus delivers the
    progress events after the batch, asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        samples = {s.name: s.value for f in text_string_to_metric_families(text.decode())
                   for s in f.samples if not s.labels}
        if samples["tidemark_queues_batches_total"] > 0 or time.monotonic() > deadline:
            return samples
        time.sleep(0.5)


def test_failures_count_then_dead_letter_list_and_replay(settings: Settings,
                                                         job: JobProcess) -> None:
    producer = LogProducer(settings)
    env, now = settings.environment, int(time.time() * 1000)
    sent: dict[str, int] = {}

    def send(mid: str) -> bytes:
        value = C.encode("Send", {"message_id": mid, "sender": "dl-a", "recipient": PEER,
                                  "environment": env, "message_type": "t.Poison",
                                  "payload": f"payload of {mid}".encode(), "timestamp_ms": now,
                                  "delivery_count": 0})
        producer.produce_raw(settings.topic("txlog"), PEER, value,
                             on_delivery=lambda err, msg: sent.__setitem__(mid, msg.offset()))
        return value

    def fail(mid: str, reason: str) -> None:  # what peer_client appends when a handler raises
        producer.produce_raw(settings.topic("txlog"), PEER, sealed(settings, "DeliveryFailed", {
            "message_id": mid, "peer": PEER, "environment": env, "sender": "dl-a",
            "message_type": "t.Poison", "reason": reason, "timestamp_ms": now}))

    original = send("poison")
    send("fine")
    fail("ghost", "not queued: ignored")
    producer.produce_raw(settings.topic("txlog"), PEER, b"\xc3\x01 not a record")  # poison
    producer.flush()
    converge(job)
    for i in range(1, LIMIT):  # one batch per failure: counts of a Send of an earlier batch
        fail("poison", f"ValueError: attempt {i}")
        producer.flush()
        converge(job)
        entry = _entries(settings)[queue_key(PEER, "poison")]
        assert entry is not None and entry["delivery_count"] == i
        assert entry["payload"] == b"payload of poison" and entry["txlog_offset"] == sent["poison"]
    fail("poison", "ValueError: the last straw")
    producer.flush()
    converge(job)

    entries = _entries(settings)
    assert entries[queue_key(PEER, "poison")] is None               # tombstoned
    assert entries[queue_key(PEER, "fine")]["delivery_count"] == 0  # type: ignore[index]
    assert queue_key(PEER, "ghost") not in entries
    letters = [x for x in _letters(settings) if x[2].get("tidemark.source") == "spark-delivery"]
    assert {(k, v) for k, v, _ in letters} == {(PEER.encode(), original)}
    heads = letters[0][2]
    assert heads["tidemark.delivery_count"] == str(LIMIT)
    assert heads["tidemark.reason"] == "ValueError: the last straw"
    assert heads["tidemark.peer"] == PEER and heads["tidemark.message_id"] == "poison"
    assert heads["tidemark.offset"] == str(sent["poison"])

    listed = json.loads(tidemark_cli(settings, "deadletter", "list", "--json"))
    delivery = [x for x in listed if x["kind"] == "delivery"]
    assert [(x["message_id"], x["peer"], x["sender"], x["message_type"], x["count"],
             x["reason"]) for x in delivery] == [
        ("poison", PEER, "dl-a", "t.Poison", LIMIT, "ValueError: the last straw")]
    assert any(x["kind"] == "poison" and x["reason"] for x in listed)
    assert json.loads(tidemark_cli(settings, "deadletter", "list", "--json", "--peer", "nobody")) == []

    done = json.loads(tidemark_cli(settings, "deadletter", "replay", "poison", "--json"))
    assert done["peer"] == PEER and done["replay_id"].startswith("poison~replay-")
    tidemark_cli(settings, "deadletter", "replay", "poison")  # again: the same id, a duplicate
    send("poison")                                     # a late duplicate of the poison itself
    producer.flush()
    converge(job)
    entries = _entries(settings)
    queued = {k: v for k, v in entries.items() if v is not None and "poison" in k}
    assert list(queued) == [queue_key(PEER, done["replay_id"])]
    again = queued[queue_key(PEER, done["replay_id"])]
    assert again is not None and again["delivery_count"] == 0
    assert again["payload"] == b"payload of poison" and again["sender"] == "dl-a"
    expected, _, bad = expected_queues(settings, delivery_limit=LIMIT)  # the reference model
    assert bad == 1 and expected == {PEER: {"fine", done["replay_id"]}}
    assert read_queues(settings).queues == expected
    assert job.alive, job.log_tail()

    scraped = _scrape_until_counted(METRICS_PORT)  # the job's listener, fed by Spark
    assert scraped["tidemark_queues_batches_total"] > 0, scraped
    assert scraped["tidemark_queues_input_rows_total"] > 0, scraped
    assert scraped["tidemark_queues_batch_duration_seconds_count"] > 0, scraped
    assert scraped["tidemark_queues_last_progress_timestamp_seconds"] > 0, scraped
    assert "tidemark_queues_query_terminated_total" in scraped  # restarts under load: any

    bad = subprocess.run([sys.executable, "-m", "tidemark", "deadletter", "replay", "nope",
                          "--bootstrap", settings.bootstrap, "--topic-prefix",
                          settings.topic_prefix], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert "nope" in bad.stderr
