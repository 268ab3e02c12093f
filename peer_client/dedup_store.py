"""Persisted dedup: the ids of messages whose handler completed, in a local LevelDB per peer.

Opt-in (``PeerOptions.dedup_dir`` or ``TIDEMARK_PEER_DEDUP_DIR``). The inbox records a
message id right after its handler returned and before its ack is queued; a later copy of
that id (replay after a crash, the txlog follower, a direct retry) is acked without calling
the handler again. The put is not synced: it reaches the OS before the ack is queued, so it
survives a SIGKILL of the process (not a power loss of the machine).

Layout of the store (keys are bytes):

- ``\\x00meta`` -> JSON ``{"format", "peer_id", "environment"}``: the owner, checked at open;
- ``i`` + id -> the 8-byte big-endian time it was recorded (ms);
- ``t`` + the same 8 bytes + id -> empty: the ids in recording order, for expiry.

Both id keys are written in one write batch. Entries expire ``ttl_ms`` after they were
recorded and, beyond ``max_entries``, oldest first; :func:`expired` is the pure decision.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tidemark.log import registry
from tidemark.peer_client.exceptions import DedupStoreError

__all__ = ["DedupStore", "expired", "store_path", "resolve_dedup_dir", "resolve_ttl_ms",
           "FORMAT"]

log = logging.getLogger("peer_client.dedup_store")

FORMAT = 1
META = b"\x00meta"
ID, TIME = b"i", b"t"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _leveldb() -> Any:
    """plyvel, imported when a store is opened: a peer without ``dedup_dir`` never loads it
    (the peer library does not depend on it; ``pip install 'tidemark[dedup]'``)."""
    try:
        import plyvel
    except ImportError:
        raise DedupStoreError(
            "the persisted dedup store (PeerOptions.dedup_dir) needs plyvel, which the peer"
            " library does not install by itself: pip install 'tidemark[dedup]'") from None
    return plyvel


def expired(oldest_first: Iterable[tuple[int, str]], count: int, now_ms: int, ttl_ms: int,
            max_entries: int) -> list[tuple[int, str]]:
    """The entries to forget, taken from the front of ``oldest_first`` ((time, id) in
    ascending order, ``count`` of them in all): those recorded before ``now_ms - ttl_ms``,
    then the oldest while more than ``max_entries`` would remain. Reads no further than the
    first entry it keeps."""
    cutoff = now_ms - ttl_ms
    out: list[tuple[int, str]] = []
    for ts, message_id in oldest_first:
        if ts >= cutoff and count - len(out) <= max_entries:
            break
        out.append((ts, message_id))
    return out


def store_path(root: str | Path, peer_id: str) -> Path:
    """The store folder of ``peer_id`` under ``root``: the id with every character but
    letters, digits, ``_`` and ``-`` written as ``%XX`` (its UTF-8 bytes)."""
    name = "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode("utf-8"))
                   for c in peer_id)
    return Path(root).expanduser() / name


def resolve_dedup_dir(configured: str | None) -> str:
    """``PeerOptions.dedup_dir`` if given (``""`` turns it off), else the setting."""
    if configured is not None:
        return configured
    return str(registry.env_value("peer_dedup_dir") or "")


def resolve_ttl_ms(configured: int | None) -> int:
    """``PeerOptions.dedup_ttl_ms`` if given, else the setting."""
    return int(configured if configured is not None else registry.env_value("peer_dedup_ttl"))


def _time_key(ts: int, raw_id: bytes) -> bytes:
    return TIME + ts.to_bytes(8, "big") + raw_id


class DedupStore:
    """The completed-message ids of one peer (see the module doc). Thread-safe."""

    def __init__(self, path: str | Path, peer_id: str, environment: str, ttl_ms: int,
                 max_entries: int, sweep_every_ms: int = 60_000) -> None:
        if ttl_ms <= 0 or max_entries <= 0:
            raise ValueError("ttl_ms and max_entries must be positive")
        self.path = Path(path)
        self.peer_id, self.environment = peer_id, environment
        self.ttl_ms, self.max_entries, self.sweep_every_ms = ttl_ms, max_entries, sweep_every_ms
        self._lock = threading.Lock()
        self._next_sweep = 0
        self.expired_total = 0
        self._db = self._open()
        try:
            self._check_owner()
            self._count = self._count_entries()
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def for_peer(cls, root: str | Path, peer_id: str, environment: str, ttl_ms: int,
                 max_entries: int) -> "DedupStore":
        """Open (or create) ``peer_id``'s store under ``root``."""
        return cls(store_path(root, peer_id), peer_id, environment, ttl_ms, max_entries)

    # ---- opening -------------------------------------------------------------------------
    def _corrupt(self, why: str) -> DedupStoreError:
        return DedupStoreError(
            f"dedup store {self.path} of peer {self.peer_id} is unreadable or corrupt ({why}):"
            f" move it aside or delete it to start with an empty one (messages whose acks"
            f" were not in Kafka yet may then be handled again)")

    def _open(self) -> Any:
        p = self.path
        plyvel = _leveldb()
        if p.exists() and not p.is_dir():
            raise self._corrupt("not a folder")
        if p.is_dir() and any(p.iterdir()) and not (p / "CURRENT").is_file():
            raise self._corrupt("a non-empty folder without a LevelDB CURRENT file")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            return plyvel.DB(str(p), create_if_missing=True, paranoid_checks=True)
        except plyvel.IOError as exc:
            if "lock" in str(exc).lower():
                raise DedupStoreError(
                    f"dedup store {p} of peer {self.peer_id} is in use by another process or"
                    f" peer object (is peer {self.peer_id} already running?): {exc}") from None
            raise self._corrupt(str(exc)) from None
        except (plyvel.Error, OSError) as exc:
            raise self._corrupt(str(exc)) from None

    def _check_owner(self) -> None:
        try:
            raw = self._db.get(META)
            if raw is None:
                if next(self._db.iterator(include_value=False), None) is not None:
                    raise self._corrupt("entries without an owner record")
                self._db.put(META, json.dumps({
                    "format": FORMAT, "peer_id": self.peer_id,
                    "environment": self.environment}).encode(), sync=True)
                return
            meta = json.loads(raw)
            owner = (meta["peer_id"], meta["environment"])
            fmt = meta["format"]
        except (_leveldb().Error, ValueError, KeyError, TypeError) as exc:
            raise self._corrupt(f"owner record: {exc}") from None
        if owner != (self.peer_id, self.environment):
            raise DedupStoreError(
                f"dedup store {self.path} belongs to peer {owner[0]} in environment"
                f" {owner[1]!r}, not to peer {self.peer_id} in {self.environment!r}:"
                f" refusing to use another peer's store (give each peer its own dedup folder)")
        if fmt != FORMAT:
            raise self._corrupt(f"format {fmt!r}, this library reads {FORMAT}")

    def _count_entries(self) -> int:
        n = 0
        try:
            for _ in self._db.iterator(prefix=TIME, include_value=False,
                                       verify_checksums=True, fill_cache=False):
                n += 1
        except _leveldb().Error as exc:
            raise self._corrupt(str(exc)) from None
        return n

    # ---- use -----------------------------------------------------------------------------
    def __contains__(self, message_id: object) -> bool:
        if not isinstance(message_id, str):
            return False
        return self._db.get(ID + message_id.encode("utf-8")) is not None

    def __len__(self) -> int:
        return self._count

    def record(self, message_id: str, now_ms: int) -> bool:
        """Remember ``message_id`` as completed at ``now_ms`` (not synced: it reaches the OS
        before this returns). False if it was already there."""
        raw = message_id.encode("utf-8")
        ts = max(0, int(now_ms))
        with self._lock:
            if self._db.get(ID + raw) is not None:
                return False
            with self._db.write_batch() as wb:
                wb.put(ID + raw, ts.to_bytes(8, "big"))
                wb.put(_time_key(ts, raw), b"")
            self._count += 1
        return True

    def _oldest_first(self) -> Iterator[tuple[int, str]]:
        for key in self._db.iterator(prefix=TIME, include_value=False, fill_cache=False):
            yield int.from_bytes(key[1:9], "big"), key[9:].decode("utf-8")

    def sweep(self, now_ms: int) -> int:
        """Forget the expired entries (see :func:`expired`); returns how many."""
        with self._lock:
            gone = expired(self._oldest_first(), self._count, now_ms, self.ttl_ms,
                           self.max_entries)
            if gone:
                with self._db.write_batch() as wb:
                    for ts, message_id in gone:
                        raw = message_id.encode("utf-8")
                        wb.delete(ID + raw)
                        wb.delete(_time_key(ts, raw))
                self._count -= len(gone)
                self.expired_total += len(gone)
            self._next_sweep = now_ms + self.sweep_every_ms
        return len(gone)

    def maybe_sweep(self, now_ms: int) -> int:
        """:meth:`sweep` once every ``sweep_every_ms``, or at once past ``max_entries``."""
        if now_ms >= self._next_sweep or self._count > self.max_entries:
            return self.sweep(now_ms)
        return 0

    def close(self) -> None:
        """Close the LevelDB (safe to call twice)."""
        with self._lock:
            if not self._db.closed:
                self._db.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return bool(self._db.closed)
