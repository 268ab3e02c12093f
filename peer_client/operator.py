"""Operator functions behind ``tidemark peer list | purge | status`` (the CLI lives in
``tidemark/``)."""

from __future__ import annotations

import time
from typing import Any

from tidemark.log.consumer import read_to_end
from tidemark.log.exceptions import CodecError, DeliveryError
from tidemark.log.offsets import end_offsets
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.wire import Sealer
from tidemark.peer_client.directory import DirectoryCache, PeerEntry
from tidemark.peer_client.exceptions import UnknownPeerError, WrongEnvironmentError
from tidemark.peer_client.records import peer_codec

__all__ = ["read_directory", "list_peers", "purge_peer", "peer_status"]


def read_directory(settings: Settings, dead_after_ms: int = 10_000,
                   timeout_s: float = 60.0) -> dict[str, DirectoryCache]:
    """The directory topic read to its end, folded per environment."""
    caches: dict[str, DirectoryCache] = {}
    decode = peer_codec().decode
    for msgs in read_to_end(settings, "directory", timeout_s=timeout_s):
        for msg in msgs:
            key = (msg.key() or b"").decode("utf-8", "replace")
            if msg.value() is None:
                for cache in caches.values():
                    cache.apply(key, None)
                continue
            try:
                dec = decode(msg.value())
            except CodecError:
                continue
            if dec.name != "PeerDescriptor":
                continue
            env = dec.record["environment"]
            if env not in caches:
                caches[env] = DirectoryCache(env, dead_after_ms)
            caches[env].apply(key, dec.record)
    return caches


def _row(entry: PeerEntry, now_ms: int, dead_after_ms: int) -> dict[str, Any]:
    return {"peer_id": entry.peer_id, "environment": entry.environment,
            "endpoint": entry.endpoint, "up": entry.alive(now_ms, dead_after_ms),
            "registered_up": entry.up, "incarnation": entry.incarnation,
            "last_heartbeat_ms": entry.timestamp_ms,
            "heartbeat_age_s": round(max(0, now_ms - entry.timestamp_ms) / 1000, 1),
            "persistent": entry.persistent, "subscriptions": sorted(entry.subscriptions)}


def list_peers(settings: Settings, environment: str | None = None,
               dead_after_ms: int = 10_000, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Every registered peer (of ``environment`` if given), by environment then id.

    ``up`` is true when the peer registered as up and its last heartbeat is at most
    ``dead_after_ms`` old; ``registered_up`` is what the peer itself last wrote.
    """
    now = int(time.time() * 1000)
    rows = []
    for env, cache in sorted(read_directory(settings, dead_after_ms, timeout_s).items()):
        if environment is None or env == environment:
            rows += [_row(e, now, dead_after_ms) for e in cache.entries()]
    return rows


def _entry(settings: Settings, peer_id: str, env: str, timeout_s: float) -> PeerEntry:
    """The directory entry of ``peer_id`` in ``env``; one clear error otherwise."""
    caches = read_directory(settings, timeout_s=timeout_s)
    entry = caches[env].get(peer_id) if env in caches else None
    if entry is None:
        others = sorted(e for e, c in caches.items() if c.get(peer_id) is not None)
        if others:
            raise WrongEnvironmentError(f"peer {peer_id} is registered in environment"
                                        f" {others[0]!r}, not {env!r}")
        raise UnknownPeerError(f"peer {peer_id} is not registered in the directory"
                               f" ({settings.topic('directory')})")
    return entry


def peer_status(settings: Settings, peer_id: str, environment: str | None = None,
                timeout_s: float = 60.0, transport: Any = None) -> dict[str, Any]:
    """A running peer's own status (phase, incarnation, replayed, forwarded, replay and
    handover durations, counters), asked over its gRPC endpoint from the directory.
    Raises :class:`PeerUnreachableError` if it does not answer (down, or gone)."""
    from tidemark.peer_client.direct import peer_status as ask
    from tidemark.peer_client.exceptions import PeerUnreachableError
    env = environment or settings.environment
    entry = _entry(settings, peer_id, env, timeout_s)
    age = round(max(0, int(time.time() * 1000) - entry.timestamp_ms) / 1000, 1)
    if not entry.endpoint:
        raise PeerUnreachableError(f"peer {peer_id} has no endpoint in the directory")
    try:
        doc = ask(entry.endpoint, env, transport=transport, peer_id=peer_id)
    except PeerUnreachableError as exc:
        state = "registered up" if entry.up else "registered down"
        raise PeerUnreachableError(f"peer {peer_id} ({state}, last heartbeat {age} s ago)"
                                   f" does not answer at {exc}") from None
    return {**doc, "heartbeat_age_s": age}


def purge_peer(settings: Settings, peer_id: str, environment: str | None = None,
               timeout_s: float = 60.0, seal: Sealer | None = None) -> dict[str, Any]:
    """Append a Purge for ``peer_id`` (Zebus's decommissioning): its queue empties.

    The Purge goes to the ``purges`` topic, which only the operator may write (Kafka's
    ACLs), and names txlog's end in the peer's partition now: every Send to the peer below
    it is dropped, wherever the queues job, the replicas and the peer's own replay have got
    to. ``seal`` signs it as the operator (:func:`tidemark.gossip.record_signing.sealer_of`
    of the operator's transport): the queues job and the peers apply a Purge only when an
    operator signed it (unsigned: insecure mode only).

    Refuses a peer the directory does not know (:class:`UnknownPeerError`) or knows only in
    another environment (:class:`WrongEnvironmentError`). Returns the peer's txlog partition,
    the offset the Purge reaches (``below``), where the Purge landed in ``purges`` and
    whether the peer is currently up.
    """
    env = environment or settings.environment
    entry = _entry(settings, peer_id, env, timeout_s)
    ends = end_offsets(settings, "txlog", timeout=timeout_s)
    partition = partition_for_peer(peer_id, len(ends))
    producer = LogProducer(settings, peer_codec())
    where: dict[str, int] = {}
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            where.update(partition=msg.partition(), offset=msg.offset())
        else:
            errors.append(err.str())
    value = producer.codec.encode("Purge", {"peer": peer_id, "environment": env,
                                            "timestamp_ms": int(time.time() * 1000),
                                            "txlog_partition": partition,
                                            "below_offset": ends[partition],
                                            "signer": b"", "signature": b""})
    if seal is not None:
        value = seal(value)
    producer.produce_raw(producer.topic("purges"), peer_id, value, on_delivery=delivered)
    producer.flush(timeout_s)
    if errors or "offset" not in where:
        raise DeliveryError(f"the Purge of {peer_id} was not acknowledged by Kafka:"
                            f" {errors[0] if errors else 'timed out'}")
    if where["partition"] != partition:  # purges and txlog differ in partition count
        raise DeliveryError(f"the Purge of {peer_id} landed in {producer.topic('purges')}"
                            f"[{where['partition']}], not [{partition}] as its txlog partition:"
                            " the two topics must have the same partition count")
    return {"peer_id": peer_id, "environment": env, "up": entry.alive(
        int(time.time() * 1000), 10_000), "partition": partition, "below": ends[partition],
        "offset": where["offset"]}
