"""Peer options: everything tunable about one peer, with defaults that suit a LAN."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tidemark.gossip.pki import TlsFiles
from tidemark.peer_client.flight import BLOCK, RAISE

__all__ = ["PeerOptions", "LEVELS", "LOG", "QUORUM", "ALL", "DIRECT_BATCH_BYTES_MAX",
           "DIRECT_RECEIVE_LIMIT"]

LOG, QUORUM, ALL = "log", "quorum", "all"
#: Durability levels, weakest first (Ultra Messaging's stability levels).
LEVELS = (LOG, QUORUM, ALL)
#: The largest ``direct_batch_bytes``; a peer's direct server refuses a call (a batch) larger
#: than DIRECT_RECEIVE_LIMIT: that much, one message of the largest size and the framing, so
#: a flood of direct deliveries cannot make a recipient hold more than a call's worth.
DIRECT_BATCH_BYTES_MAX = 8 << 20
DIRECT_RECEIVE_LIMIT = 16 << 20


@dataclass(frozen=True)
class PeerOptions:
    """Tunables of a peer. Times are in milliseconds unless the name says otherwise."""

    bind: str = "127.0.0.1:0"          #: where the direct-delivery gRPC server listens
    advertise: str | None = None        #: endpoint written to the directory (default: bind)
    persistent: bool = True             #: others log persistent messages for us while down
    workers: int = 8                    #: threads running plain (non-async) handlers
    inbox_limit: int = 10_000           #: accepted but unfinished messages before backpressure
    #: live messages held back while the peer replays, at most (beyond: refused with a
    #: receipt; the sender logs them and they arrive through txlog)
    hold_limit: int = 10_000
    hold_bytes: int = 64 << 20          #: ... and their payload bytes, at most
    flight_size: int = 10_000           #: sends unconfirmed at their durability level
    flight_mode: str = BLOCK            #: "block" or "raise" when the flight size is reached
    ack_batch: int = 500                #: acks appended together once this many are pending
    ack_linger_ms: int = 20             #: ... or once the oldest has waited this long
    #: acks of messages with a txlog position (replayed ones) go as range acks, this many
    #: at most per record (below 128 KiB of ids); False: every ack by id
    range_acks: bool = True
    replay_ack_batch: int = 4_000
    heartbeat_ms: int = 2_000           #: how often the directory entry is re-appended
    dead_after_ms: int = 10_000         #: a peer without heartbeat this long counts as down
    direct_timeout_ms: int = 5_000      #: deadline of one direct-delivery call
    direct_batch: int = 1_000           #: messages per direct-delivery call, at most
    #: ... and payload bytes per call, at most (a larger single message goes alone); the
    #: recipient refuses calls over DIRECT_RECEIVE_LIMIT
    direct_batch_bytes: int = 4 << 20
    unreachable_backoff_ms: int = 1_000  #: no direct attempt to a peer that just failed one
    dedup_window: int = 100_000         #: message ids remembered for dedup (at least; <= 2x)
    #: folder of the persisted dedup stores (one LevelDB per peer id; see
    #: ``peer_client.dedup_store``); None: the ``TIDEMARK_PEER_DEDUP_DIR`` setting; "": off
    dedup_dir: str | None = None
    #: this peer's TLS material (trust bundle, certificate, key); None: ``TIDEMARK_TLS_*``, else
    #: the local stack's CA (see docs/security.md)
    tls: TlsFiles | None = None
    #: True: plaintext gRPC, no caller identity (development only; TIDEMARK_INSECURE=1)
    insecure: bool | None = None
    dedup_ttl_ms: int | None = None      #: persisted ids expire this long after being recorded
    dedup_max_entries: int = 1_000_000  #: ... and beyond this many, oldest first
    durability_timeout_ms: int = 30_000  #: quorum/all: how long a send waits for replicas
    start_timeout_s: float = 60.0       #: reading the directory, registering
    stop_timeout_s: float = 30.0        #: draining handlers and flushing acks at stop
    tick_ms: int = 10                   #: period of the housekeeping thread
    #: serve Prometheus ``/metrics`` on ``host:port`` (port 0: a free one); None: off
    metrics_bind: str | None = None

    def __post_init__(self) -> None:
        if self.flight_mode not in (BLOCK, RAISE):
            raise ValueError(f"flight_mode must be {BLOCK!r} or {RAISE!r}")
        for name in ("workers", "inbox_limit", "flight_size", "ack_batch", "replay_ack_batch",
                     "heartbeat_ms", "dead_after_ms", "direct_timeout_ms", "direct_batch",
                     "dedup_window", "hold_limit", "hold_bytes", "direct_batch_bytes",
                     "dedup_max_entries", "durability_timeout_ms", "tick_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.direct_batch_bytes > DIRECT_BATCH_BYTES_MAX:
            raise ValueError(f"direct_batch_bytes must be at most {DIRECT_BATCH_BYTES_MAX},"
                             f" got {self.direct_batch_bytes!r}")
        if self.dedup_ttl_ms is not None and self.dedup_ttl_ms <= 0:
            raise ValueError(f"dedup_ttl_ms must be positive, got {self.dedup_ttl_ms!r}")

    def with_(self, **changes: Any) -> "PeerOptions":
        """A copy with ``changes``."""
        return replace(self, **changes)
