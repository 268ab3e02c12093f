"""kill -9 a replica node at random points of its ingest (3 times, each reached as a condition,
not slept to); after restart its store equals the log offset by offset: no gap, no
duplicate."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.replicas import ends, replica_stack, status
from tests.support import wait_for
from tidemark.log.consumer import LogConsumer
from tidemark.log.offsets import end_offsets
from tidemark.log.producer import LogProducer
from tidemark.replica.store import Store
from tidemark.stack.replicas import plan

pytestmark = pytest.mark.fault


def _produce(settings, total: int) -> None:
    producer = LogProducer(settings)
    for i in range(total):
        peer = f"peer-{i % 97}"
        producer.produce("txlog", peer, "Send", {
            "message_id": f"m{i}", "sender": "s", "recipient": peer, "environment": "default",
            "message_type": "t", "payload": b"x" * 100, "timestamp_ms": int(time.time() * 1000),
            "delivery_count": 0})
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush()


def _applied(stack) -> int | None:
    """Records p0r0 reports applied (sum of its txlog base ends), None if it is not up."""
    doc = status(stack, "p0r0")
    if not doc:
        return None
    parts = doc["nodes"][0]["partitions"]
    return sum(p["base"][1] for tp, p in parts.items() if tp.startswith("txlog/"))


def test_kill9_during_ingest_loses_and_duplicates_nothing(bootstrap: str, tmp_path: Path) -> None:
    rng = random.Random()
    with replica_stack(bootstrap, tmp_path / "stack", "1x1", min_age_ms=3_600_000) as stack:
        settings = stack.settings()
        stack.kill("p0r0")  # the load goes in first, so every kill lands mid-ingest
        _produce(settings, 300_000)
        total = sum(ends(stack).values())
        stack.up(extra=[lambda s: plan(s, "1x1")], timeout_s=60)
        for kill in range(3):
            # a random point of the remaining ingest, reached (not slept to)
            now = wait_for(lambda: _applied(stack) is not None, 30, what="p0r0 answering")
            seen = _applied(stack) or 0
            goal = seen + int(rng.uniform(0.1, 0.4) * (total - seen))
            at = wait_for(lambda g=goal: (lambda a: a if a is not None and a >= g else None)(
                _applied(stack)), 60, interval=0.005, what=f"p0r0 past {goal} (kill {kill})")
            assert now and at < total, "the ingest ended before the kill"
            stack.kill("p0r0")  # while records are being applied
            stack.up(extra=[lambda s: plan(s, "1x1")], timeout_s=60)
        target = ends(stack)

        last: list = []

        def caught_up() -> bool:
            doc = status(stack, "p0r0")
            last[:] = [doc]
            if not doc:
                return False
            parts = doc["nodes"][0]["partitions"]
            return all(parts[tp]["base"][1] == o and not parts[tp]["detached"]
                       for tp, o in target.items())
        try:
            wait_for(caught_up, 90, what="p0r0 at the log ends")
        except AssertionError:
            doc = last[0] if last else None
            parts = doc["nodes"][0]["partitions"] if doc else None
            raise AssertionError(f"p0r0 not at the log ends {target}: {parts}") from None
        stack.down(grace_s=10)
        # the log, read before the stack's topics are deleted
        consumer = LogConsumer(settings)
        consumer.assign({("txlog", k): 0 for k in range(4)})
        log: dict[int, dict[int, bytes]] = {k: {} for k in range(4)}
        total = sum(end_offsets(settings, "txlog").values())
        seen = 0
        deadline = time.monotonic() + 60
        while seen < total and time.monotonic() < deadline:
            for msg in consumer.consume_batch(20000, 0.5):
                log[msg.partition()][msg.offset()] = msg.value()
                seen += 1
        consumer.close()
        assert seen == total

    store = Store(tmp_path / "stack" / "replicas" / "p0r0", "p0r0", create=False)
    for k in range(4):
        stored = dict(store.records(k))
        assert sorted(stored) == sorted(log[k]), f"txlog/{k}: offsets differ"
        assert stored == log[k], f"txlog/{k}: values differ"
        m = store.map("txlog", k)
        assert m.base_end == target[f"txlog/{k}"] and not m.detached
    store.close()
