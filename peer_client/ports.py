"""What the peer core needs from the outside world.

The core is the same for the real peer (Kafka, gRPC, replica nodes, threads) and for the
in-memory test double; only these ports differ. Every port is callback-based so that it can
complete synchronously (in memory) or later on another thread (Kafka, gRPC).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["LogPort", "DirectPort", "DirectoryPort", "StabilityPort", "Executor",
           "KafkaCallback", "DirectCallback"]

#: ``(error or None, message with .partition() and .offset())`` as confluent-kafka calls it.
KafkaCallback = Callable[[Any, Any], None]
#: ``(receipt record or None, error or None)``.
DirectCallback = Callable[[dict[str, Any] | None, BaseException | None], None]

class LogPort(Protocol):
    """Appends encoded records to txlog (key = the peer the record is about)."""

    def append(self, key: str, value: bytes, on_delivery: KafkaCallback | None = None) -> None:
        """Append one record; ``on_delivery`` fires once Kafka acknowledged or refused it."""

    def append_many(self, key: str, values: list[bytes],
                    on_delivery: KafkaCallback | None = None) -> None:
        """Append ``values`` in order under one key; ``on_delivery`` fires for each."""

    def flush(self, timeout: float) -> None:
        """Wait for every appended record (raises if one was refused)."""

    def serve(self) -> None:
        """Run pending completion callbacks now, if the port queues them."""

    # A port may also offer ``appender()``: a callable ``(value, key, -1, on_delivery)``
    # appending as :meth:`append` does, but raising ``BufferError`` where ``append`` would
    # wait (the Kafka port's is the producer's ``produce`` itself). The send path uses it
    # when there, and ``append`` otherwise.


class DirectPort(Protocol):
    """Direct delivery to other peers."""

    def deliver(self, endpoint: str, batch: bytes, done: DirectCallback) -> None:
        """Send one encoded DirectBatch; ``done`` gets the decoded DirectReceipt."""


class DirectoryPort(Protocol):
    """Writes this peer's PeerDescriptor to the directory."""

    def publish(self, peer_id: str, descriptor: dict[str, Any],
                on_delivery: KafkaCallback | None = None) -> None:
        """Append (or replace) the descriptor of ``peer_id``."""


class StabilityPort(Protocol):
    """Answers durability ``quorum`` and ``all`` (the replica nodes)."""

    def wait(self, level: str, partition: int, offset: int,
             done: Callable[[BaseException | None], None]) -> None:
        """Call ``done(None)`` once txlog ``partition`` at ``offset`` holds at ``level``,
        or ``done(error)`` (e.g. :class:`DurabilityTimeoutError` naming the partition)."""


class Executor(Protocol):
    """Runs handler jobs, one at a time per key (the sender), in order."""

    def submit(self, key: str, job: Any) -> None:
        """Queue ``job`` (a :class:`tidemark.peer_client.jobs.Job`) behind earlier jobs of
        ``key``."""

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted job finished; False at the deadline."""

    def close(self) -> None:
        """Stop the workers."""
