"""GC pins as leases, persisted in the node's store.

A pin holds the node's local GC cut at its barrier (``gossip.gc_point.local_gc_cut``) for
as long as its lease runs. The replaying peer renews it (every message on its replay
stream, or ``RenewPin``); a peer that disappears stops renewing and the node's tick drops
the pin once it expires, so a crashed peer cannot hold GC forever. Each pin is written to
the store (``replica.store.pin_key``) when granted and when renewed, and loaded again when
the node starts, so a restarted replica still holds the pins of running replays. Expiry is
wall-clock time (it has to mean the same thing after a restart). A renewal is persisted
only once it moves the stored expiry by at least :data:`PERSIST_STEP_MS` (one LevelDB put
per second per pin at most), so a restarted node may expire a pin up to that much early.

A pin belongs to its ``owner`` (the replaying peer). When a peer's call is being served
(``gossip.peer_auth.serving_peer``: the gRPC layer authenticated its token), it may only
grant pins owned by itself, on its own txlog partition only, and renew or release its own;
another peer's pin or partition is refused with
:class:`~tidemark.gossip.exceptions.PeerForbiddenError`. The node's own work and cluster members are
not restricted.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tidemark.gossip.gc_point import clamp_pin
from tidemark.gossip.peer_auth import check_owner, check_pin_barrier
from tidemark.log import clock
from tidemark.replica.store import PIN_PREFIX, Store, pin_key

__all__ = ["Lease", "Leases", "PERSIST_STEP_MS", "DEFAULT_LEASE_MS"]

log = logging.getLogger(__name__)

#: Lease of a pin whose caller did not ask for another.
DEFAULT_LEASE_MS = 30_000
#: A renewal is written to the store once it moves the stored expiry by this much.
PERSIST_STEP_MS = 1_000
_MIN_LEASE_MS, _MAX_LEASE_MS = 500, 3_600_000


def _now_ms() -> int:
    return clock.now_ms()


@dataclass
class Lease:
    """One pin: what it holds (``barrier``: ``{"txlog/k": offset}``), until when."""

    pin: str
    barrier: dict[str, int]
    lease_ms: int
    expires_ms: int
    owner: str = ""
    created_ms: int = 0
    stored_expires_ms: int = field(default=0, compare=False)

    def to_json(self) -> bytes:
        """The stored form."""
        doc = asdict(self)
        doc.pop("stored_expires_ms")
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "Lease":
        """Inverse of :meth:`to_json`."""
        doc = json.loads(raw)
        return cls(str(doc["pin"]), {str(k): int(v) for k, v in doc["barrier"].items()},
                   int(doc["lease_ms"]), int(doc["expires_ms"]), str(doc.get("owner", "")),
                   int(doc.get("created_ms", 0)), int(doc["expires_ms"]))

    def row(self, now_ms: int) -> dict[str, Any]:
        """The status form."""
        return {"pin": self.pin, "owner": self.owner, "barrier": dict(self.barrier),
                "lease_ms": self.lease_ms, "expires_ms": self.expires_ms,
                "expires_in_s": round(max(0, self.expires_ms - now_ms) / 1000, 1)}


def clamp_lease(lease_ms: int | None) -> int:
    """A requested lease within the allowed bounds (the default if None)."""
    if lease_ms is None:
        return DEFAULT_LEASE_MS
    return max(_MIN_LEASE_MS, min(_MAX_LEASE_MS, int(lease_ms)))


class Leases:
    """The node's pins. Thread-safe; persistent once :meth:`open` gave it a store.

    ``values()`` (each pin's barrier) and ``len()`` keep the shape of the in-memory pin
    dict this replaces, which is what ``local_gc_cut`` and the gossiped state read.
    """

    def __init__(self, clock: Callable[[], int] = _now_ms, partitions: int | None = None
                 ) -> None:
        self._clock = clock
        #: txlog partitions: a peer may pin only its own (None: not checked)
        self.partitions = partitions
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._store: Store | None = None

    def open(self, store: Store) -> list[Lease]:
        """Load the pins persisted in ``store`` (dropping the ones that expired while the
        node was down) and persist from now on; returns the pins kept."""
        now = self._clock()
        kept: list[Lease] = []
        gone: list[bytes] = []
        for key, raw in store.db.iterator(prefix=PIN_PREFIX):
            try:
                lease = Lease.from_json(raw)
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("unreadable pin %r in the store: dropped", key)
                gone.append(key)
                continue
            if lease.expires_ms <= now:
                log.warning("pin %s of %r expired while the node was down: dropped",
                            lease.pin, lease.owner)
                gone.append(key)
                continue
            kept.append(lease)
        for key in gone:
            store.db.delete(key)
        with self._lock:
            self._store = store
            self._leases.update({lease.pin: lease for lease in kept})
        if kept:
            log.warning("holding %d pin(s) from before the restart: %s", len(kept),
                        ", ".join(f"{p.pin} ({p.owner}) {p.barrier}" for p in kept))
        return kept

    def _persist(self, lease: Lease) -> None:
        if self._store is not None and not self._store.db.closed:
            self._store.db.put(pin_key(lease.pin), lease.to_json())
            lease.stored_expires_ms = lease.expires_ms

    def _forget(self, pin: str) -> None:
        if self._store is not None and not self._store.db.closed:
            self._store.db.delete(pin_key(pin))

    # ---- changes ---------------------------------------------------------------------------
    def grant(self, barrier: Mapping[str, int], gc_point: Mapping[str, int],
              lease_ms: int | None = None, owner: str = "") -> Lease:
        """A new pin at ``barrier``, raised to the GC point (what GC released cannot be
        held), expiring ``lease_ms`` from now unless renewed. A peer being served may only
        pin for itself (``owner`` defaults to it), and only its own txlog partition."""
        owner = check_owner(owner, "Pin", new=True)
        check_pin_barrier(barrier, self.partitions)
        now, ms = self._clock(), clamp_lease(lease_ms)
        lease = Lease(uuid.uuid4().hex, clamp_pin(barrier, gc_point), ms, now + ms, owner, now)
        with self._lock:
            self._leases[lease.pin] = lease
            self._persist(lease)
        return lease

    def renew(self, pin: str, lease_ms: int | None = None) -> Lease | None:
        """Push ``pin``'s expiry to ``lease_ms`` (default: its own lease) from now; None if
        the pin is unknown or already expired."""
        now = self._clock()
        with self._lock:
            lease = self._leases.get(pin)
            if lease is None or lease.expires_ms <= now:
                return None
            check_owner(lease.owner, "RenewPin")
            if lease_ms is not None:
                lease.lease_ms = clamp_lease(lease_ms)
            lease.expires_ms = max(lease.expires_ms, now + lease.lease_ms)
            if lease.expires_ms - lease.stored_expires_ms >= min(PERSIST_STEP_MS,
                                                                 lease.lease_ms // 4):
                self._persist(lease)
            return Lease(**asdict(lease))

    def release(self, pin: str) -> bool:
        """Drop ``pin``; whether it was held."""
        with self._lock:
            held = self._leases.get(pin)
            if held is not None:
                check_owner(held.owner, "Unpin")
            lease = self._leases.pop(pin, None)
            if lease is not None:
                self._forget(pin)
        return lease is not None

    def expire(self, now_ms: int | None = None) -> list[Lease]:
        """Drop every pin whose lease ran out (the node's tick calls this)."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            gone = [lease for lease in self._leases.values() if lease.expires_ms <= now]
            for lease in gone:
                del self._leases[lease.pin]
                self._forget(lease.pin)
        for lease in gone:
            log.warning("pin %s of %r at %s expired (not renewed for %d ms): released",
                        lease.pin, lease.owner, lease.barrier, lease.lease_ms)
        return gone

    # ---- reads -----------------------------------------------------------------------------
    def get(self, pin: str) -> Lease | None:
        """A copy of ``pin``'s lease, if held and not expired."""
        with self._lock:
            lease = self._leases.get(pin)
            if lease is None or lease.expires_ms <= self._clock():
                return None
            return Lease(**asdict(lease))

    def values(self) -> list[dict[str, int]]:
        """Every held pin's barrier (``{"txlog/k": offset}``)."""
        with self._lock:
            return [dict(lease.barrier) for lease in self._leases.values()]

    def status(self) -> list[dict[str, Any]]:
        """The pins as status rows, oldest first."""
        now = self._clock()
        with self._lock:
            leases = sorted(self._leases.values(), key=lambda x: (x.created_ms, x.pin))
            return [lease.row(now) for lease in leases]

    def __len__(self) -> int:
        with self._lock:
            return len(self._leases)
