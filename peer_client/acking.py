"""The ack side of the peer core: acks of handled messages, batched (one AckBatch record per
batch), and the DeliveryFailed record of a handler that raised.

Mixed into :class:`tidemark.peer_client.core.PeerCore`, like :mod:`tidemark.peer_client.sending`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tidemark.peer_client.acks import AckBatcher, chunks
from tidemark.peer_client.ports import LogPort
from tidemark.peer_client.records import Envelope

__all__ = ["Acking"]

log = logging.getLogger("peer_client")


class Acking:
    """Acks and failure records over the state :class:`~tidemark.peer_client.core.PeerCore`
    holds."""

    peer_id: str
    environment: str
    stats: Any
    clock_ms: Callable[[], int]
    acks: AckBatcher
    log_port: LogPort
    encode_record: Callable[[str, dict[str, Any]], bytes]
    _ack_lock: threading.Lock
    _encode_acks: Callable[[Sequence[str], int], bytes]
    _ack_cb: Callable[[Any, Any], None]

    def _ack(self, env: Envelope) -> None:
        self._ack_many((env,))

    def _ack_many(self, envs: Sequence[Envelope]) -> None:
        """Queue the acks of handled ``envs`` (persistent ones) under one lock; append the
        batches that became due, each as one AckBatch record."""
        ids = [env.message_id for env in envs if env.persistent]
        if not ids:
            return
        now = self.clock_ms()
        with self._ack_lock:
            batches = self.acks.add_many(ids, now)
        for batch in batches:
            self._append_acks(batch)

    def _append_acks(self, batch: Sequence[str]) -> None:
        """Append the acks of ``batch`` (message ids) as AckBatch records."""
        if not batch:
            return
        now = self.clock_ms()
        for ids in chunks(batch, self.acks.max_batch):
            self.log_port.append(self.peer_id, self._encode_acks(ids, now), self._ack_cb)
        self.stats["acks"] += len(batch)

    def _ack_delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.stats["ack_errors"] += 1
            log.warning("an ack of peer %s was not acknowledged by Kafka: %s (the message"
                        " will be delivered again)", self.peer_id, err)

    def flush_acks(self) -> int:
        """Append every pending ack now; returns how many."""
        with self._ack_lock:
            batch = self.acks.drain()
        self._append_acks(batch)
        return len(batch)

    def drop_pending_acks(self) -> int:
        """Forget unappended acks (a crash in the test double)."""
        with self._ack_lock:
            return len(self.acks.drain())

    def _record_failure(self, env: Envelope, reason: str, kind: str) -> None:
        self.stats["failed_deliveries"] += 1
        if not env.persistent:
            return
        value = self.encode_record("DeliveryFailed", {
            "message_id": env.message_id, "peer": self.peer_id, "environment": self.environment,
            "sender": env.sender, "message_type": env.message_type, "reason": reason[:1000],
            "timestamp_ms": self.clock_ms()})
        self.log_port.append(self.peer_id, value, self._ack_cb)
