"""The directory cache: pure state built from PeerDescriptor records, no I/O.

Rules (the property tests check them against a dict model):

* A record of another environment is rejected: it never enters the cache, and the peer id is
  remembered as *foreign* so that sending to it fails with a clear error.
* A tombstone (``None``) removes the peer.
* A ``down`` record written by an incarnation other than the cached one is ignored: a stale
  incarnation cannot mark its successor down.
* Otherwise the newest record in log order wins (the directory topic serialises writers).
* A peer is *alive* when its entry is up and its last heartbeat (``timestamp_ms``) is at most
  ``dead_after_ms`` old.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PeerEntry", "Outcome", "DirectoryCache", "needs_probe", "subscriptions_of"]


@dataclass(frozen=True)
class PeerEntry:
    """One peer as the directory knows it."""

    peer_id: str
    environment: str
    endpoint: str
    up: bool
    persistent: bool
    subscriptions: frozenset[str]
    incarnation: str
    timestamp_ms: int

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> "PeerEntry":
        """From a decoded PeerDescriptor."""
        return cls(rec["peer_id"], rec["environment"], rec["endpoint"], bool(rec["up"]),
                   bool(rec["persistent"]), frozenset(rec.get("subscriptions") or ()),
                   rec.get("incarnation") or "", int(rec["timestamp_ms"]))

    def to_record(self) -> dict[str, Any]:
        """The PeerDescriptor record."""
        return {"peer_id": self.peer_id, "environment": self.environment,
                "endpoint": self.endpoint, "up": self.up, "persistent": self.persistent,
                "subscriptions": sorted(self.subscriptions), "timestamp_ms": self.timestamp_ms,
                "incarnation": self.incarnation}

    def alive(self, now_ms: int, dead_after_ms: int) -> bool:
        """Up, with a heartbeat no older than ``dead_after_ms``."""
        return self.up and now_ms - self.timestamp_ms <= dead_after_ms


@dataclass(frozen=True)
class Outcome:
    """What applying one record did: ``applied``, ``removed``, ``ignored`` or ``rejected``."""

    kind: str
    peer_id: str
    reason: str = ""
    entry: PeerEntry | None = None


class DirectoryCache:
    """Peers of one environment by id, built from the compacted directory topic."""

    def __init__(self, environment: str, dead_after_ms: int) -> None:
        self.environment = environment
        self.dead_after_ms = dead_after_ms
        self._entries: dict[str, PeerEntry] = {}
        self._foreign: dict[str, str] = {}
        #: :meth:`get` without a Python frame (the send path's lookup)
        self.entries_get = self._entries.get
        #: ids registered in another environment only (a container: ``id in foreign_ids``)
        self.foreign_ids: Mapping[str, str] = self._foreign
        self._believed_alive: set[str] = set()

    def apply(self, key: str, record: Mapping[str, Any] | None) -> Outcome:
        """Fold one directory record (``None`` is a tombstone) into the cache."""
        if record is None:
            self._foreign.pop(key, None)
            if self._entries.pop(key, None) is None:
                return Outcome("ignored", key, "tombstone for an unknown peer")
            self._believed_alive.discard(key)
            return Outcome("removed", key)
        peer_id = record.get("peer_id", "")
        if peer_id != key:
            return Outcome("rejected", key, f"record for {peer_id!r} under key {key!r}")
        env = record.get("environment", "")
        if env != self.environment:
            if key not in self._entries:
                self._foreign[key] = env
            return Outcome("rejected", key, f"peer {key} registered in environment {env!r},"
                                            f" this directory is {self.environment!r}")
        entry = PeerEntry.from_record(record)
        current = self._entries.get(key)
        if current is not None and not entry.up and entry.incarnation != current.incarnation:
            return Outcome("ignored", key, f"down record of stale incarnation"
                                           f" {entry.incarnation!r} (current"
                                           f" {current.incarnation!r})", current)
        self._entries[key] = entry
        self._foreign.pop(key, None)
        return Outcome("applied", key, entry=entry)

    def get(self, peer_id: str) -> PeerEntry | None:
        """The entry of ``peer_id``, if registered in this environment."""
        return self._entries.get(peer_id)

    def foreign_environment(self, peer_id: str) -> str | None:
        """The other environment ``peer_id`` registered in, if it did (and not in ours)."""
        return self._foreign.get(peer_id)

    def is_alive(self, peer_id: str, now_ms: int) -> bool:
        """Whether ``peer_id`` is up with a fresh heartbeat."""
        entry = self._entries.get(peer_id)
        return entry is not None and entry.alive(now_ms, self.dead_after_ms)

    def subscribers(self, message_type: str) -> list[PeerEntry]:
        """Every registered peer (up or down) subscribing to ``message_type``, by id."""
        return sorted((e for e in self._entries.values() if message_type in e.subscriptions),
                      key=lambda e: e.peer_id)

    def expire(self, now_ms: int) -> list[str]:
        """Peers that were alive at the previous call and no longer are (went down or
        stopped heartbeating); remembers who is alive now."""
        alive = {p for p, e in self._entries.items() if e.alive(now_ms, self.dead_after_ms)}
        gone = sorted(self._believed_alive - alive)
        self._believed_alive = alive
        return gone

    def entries(self) -> list[PeerEntry]:
        """Every entry, by peer id."""
        return [self._entries[k] for k in sorted(self._entries)]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, peer_id: object) -> bool:
        return peer_id in self._entries


def needs_probe(entry: PeerEntry | None, my_incarnation: str, now_ms: int,
                dead_after_ms: int) -> bool:
    """Whether starting ``my_incarnation`` must first check that ``entry`` is really gone.

    A registration that is down, stale, or our own needs no check. An alive registration of
    another incarnation is either a running duplicate (refuse) or a crashed process whose
    heartbeat has not expired yet (take over): the caller asks its endpoint to decide.
    """
    return (entry is not None and entry.incarnation != my_incarnation
            and entry.alive(now_ms, dead_after_ms))


def subscriptions_of(names: Iterable[str]) -> list[str]:
    """Sorted, deduplicated subscription list for a descriptor."""
    return sorted(set(names))
