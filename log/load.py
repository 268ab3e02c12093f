"""``tidemark load``: valid txlog traffic (Sends, and Acks from the recipients' side)."""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.log import registry
from tidemark.log.offsets import end_offsets
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.topics import require_topics
from tidemark.log.wire import Sealer

__all__ = ["LoadResult", "generate_load", "stderr_progress", "progress_wanted", "ACK_BATCH"]

#: The most ids of one signed AckBatch the load generator writes.
ACK_BATCH = 100


@dataclass
class LoadResult:
    """What a load run wrote."""

    sent: int = 0
    acked: int = 0
    peers: dict[str, dict[str, int]] = field(default_factory=dict)
    end_offsets: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    unacked: dict[str, list[str]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The documented JSON shape."""
        return {"sent": self.sent, "acked": self.acked, "peers": self.peers,
                "end_offsets": self.end_offsets}


def generate_load(settings: Settings, peers: int = 100, messages: int = 100_000,
                  ack_ratio: float = 0.5, payload_bytes: int = 150, seed: int | None = None,
                  keep_unacked: bool = False,
                  progress: Callable[[int, int], None] | None = None,
                  sealers: Callable[[str], Sealer] | None = None) -> LoadResult:
    """Send ``messages`` Sends to random recipients; ack ``ack_ratio`` of them.

    Each ack is appended after its Send by the same producer and to the same partition (the
    key is the recipient), so a reader always sees the Send first. With ``keep_unacked`` the
    result lists every unacked message id per peer (the model tests compare against).

    Without ``sealers`` each ack is a single-id Ack, which only an insecure cluster applies.
    With ``sealers`` (recipient -> its signing step, e.g. certificates issued from the
    cluster's CA folder) the acks are what a peer writes: AckBatch records signed as the
    recipient, up to :data:`ACK_BATCH` ids each.
    """
    if not 0.0 <= ack_ratio <= 1.0:
        raise ValueError("ack_ratio must be within [0, 1]")
    require_topics(settings, ("txlog",))  # one line if Kafka is unreachable or txlog missing
    rng = random.Random(seed)
    run = os.urandom(4).hex()
    names = [f"peer-{i}" for i in range(peers)]
    result = LoadResult(peers={n: {"sent": 0, "acked": 0} for n in names})
    producer = LogProducer(settings)
    payload = rng.randbytes(payload_bytes)
    env = settings.environment
    started = time.monotonic()
    encode = producer.codec.encode
    topic = producer.topic("txlog")
    pending: dict[str, list[str]] = {}  # signed acks not written yet, per recipient

    def write_acks(recipient: str) -> None:
        ids = pending.pop(recipient, [])
        if ids and sealers is not None:
            producer.produce_raw(topic, recipient, sealers(recipient)(encode("AckBatch", {
                "peer": recipient, "environment": env, "message_ids": ids,
                "timestamp_ms": int(time.time() * 1000), "signer": b"", "signature": b""})))
    for i in range(messages):
        recipient = names[rng.randrange(peers)]
        sender = names[rng.randrange(peers)]
        msg_id = f"{run}-{i}"
        now = int(time.time() * 1000)
        producer.produce_raw(topic, recipient, encode("Send", {
            "message_id": msg_id, "sender": sender, "recipient": recipient, "environment": env,
            "message_type": "load.Event", "payload": payload, "timestamp_ms": now,
            "delivery_count": 0}))
        stats = result.peers[recipient]
        stats["sent"] += 1
        if rng.random() < ack_ratio:
            if sealers is None:
                producer.produce_raw(topic, recipient, encode("Ack", {
                    "message_id": msg_id, "peer": recipient, "environment": env,
                    "timestamp_ms": now}))
            else:
                pending.setdefault(recipient, []).append(msg_id)
                if len(pending[recipient]) >= ACK_BATCH:
                    write_acks(recipient)
            stats["acked"] += 1
            result.acked += 1
        elif keep_unacked:
            result.unacked.setdefault(recipient, []).append(msg_id)
        result.sent += 1
        if i % 10000 == 0:
            producer.poll(0)
            if progress and i:
                progress(i, messages)
    for recipient in list(pending):
        write_acks(recipient)
    _drain(producer)
    result.seconds = time.monotonic() - started
    if progress:
        progress(messages, messages)
    result.end_offsets = {str(p): o for p, o in sorted(end_offsets(settings, "txlog").items())}
    result.peers = {n: s for n, s in result.peers.items() if s["sent"]}
    return result


def _drain(producer: LogProducer, stall_s: float = 30.0) -> None:
    """Wait until Kafka acknowledged every record (raises :class:`DeliveryError` otherwise).

    A broker loss pauses deliveries while leadership moves, and a large backlog can take
    longer than any fixed timeout on a busy machine: keep waiting as long as records keep
    being acknowledged, and give up only when nothing moved for ``stall_s`` (librdkafka's
    own delivery timeout still fails every record it cannot deliver).
    """
    remaining = len(producer)
    last_move = time.monotonic()
    while remaining and time.monotonic() - last_move < stall_s:
        now_left = producer.raw.flush(1.0)
        if now_left < remaining:
            last_move = time.monotonic()
        remaining = now_left
    producer.flush(stall_s if remaining else 1.0)


def progress_wanted(env: Mapping[str, str], tty: bool) -> bool:
    """Whether to print progress: ``TIDEMARK_PROGRESS`` when set (true or false; anything
    else is a :class:`~tidemark.log.exceptions.ConfigError`), else whether stderr is a
    terminal."""
    spec = registry.setting("progress")
    text = env.get(spec.env, "")
    return bool(spec.parse(text)) if text.strip() else tty


def stderr_progress(label: str) -> Callable[[int, int], None]:
    """A progress callback printing ``label: done/total`` to stderr (see
    :func:`progress_wanted`)."""
    wanted = progress_wanted(os.environ, sys.stderr.isatty())

    def report(done: int, total: int) -> None:
        if wanted:
            print(f"\r{label}: {done}/{total}", end="\n" if done >= total else "",
                  file=sys.stderr, flush=True)
    return report
