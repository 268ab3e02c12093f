"""Who may call what on a replica node: the cluster secret and the method sets.

Members of the cluster (nodes, and any process that loaded the cluster file: the CLI, tools, tests)
sign their calls with the cluster secret (:func:`sign_request`); peers present peer tokens
(:mod:`tidemark.gossip.peer_auth`). :mod:`tidemark.gossip.service` applies both on either side.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Iterable
from typing import Any

from tidemark.log import clock

__all__ = ["CLUSTER_METHODS", "PEER_METHODS", "WAIT_METHODS", "MAX_SKEW_S",
           "register_cluster_secret", "cluster_secret", "sign_request", "verify_request",
           "secret_key"]

#: Methods only members of the cluster may call: gossip, status and backfill. With a cluster
#: secret configured, a node refuses them (UNAUTHENTICATED) unless the request carries an
#: HMAC-SHA256 of (method, timestamp, body digest) under that secret, timestamped within
#: :data:`MAX_SKEW_S`.
CLUSTER_METHODS = frozenset({"Gossip", "Status", "Digest", "Fetch"})
#: Methods acting on one peer's queue or pins. With a cluster secret and an environment, a
#: node serves them only to a peer token of this environment (:mod:`tidemark.gossip.peer_auth`)
#: naming the peer concerned (``Replay``: the request's ``peer``; pins: their owner, checked
#: in ``replica.leases``), or to a cluster member's signed call (unary ones).
PEER_METHODS = frozenset({"Replay", "Pin", "RenewPin", "Unpin"})
#: The durability waits of peers (``quorum``/``all``) and their stream (``Watch``). They read
#: no queue, so any peer of the node's environment may call them: with a cluster secret and
#: an environment, a node serves them to a peer token of that environment or (unary ones) to
#: a member's signed call, and refuses another environment's token (PERMISSION_DENIED) or
#: none (UNAUTHENTICATED).
WAIT_METHODS = frozenset({"WaitApplied", "WaitStable", "Watch"})
MAX_SKEW_S = 60.0
_TS_KEY, _MAC_KEY = "x-tidemark-ts", "x-tidemark-mac"
_SECRETS: dict[str, bytes] = {}  # address -> secret of the cluster file that named it
_SECRETS_LOCK = threading.Lock()


def secret_key(secret: str | bytes) -> bytes:
    """A secret as bytes."""
    return secret.encode() if isinstance(secret, str) else secret


def cluster_secret(address: str) -> bytes | None:
    """The secret registered for ``address`` (:func:`register_cluster_secret`), if any."""
    with _SECRETS_LOCK:
        return _SECRETS.get(address)


def register_cluster_secret(addresses: Iterable[str], secret: str | bytes) -> None:
    """Remember that calls to ``addresses`` are signed with ``secret`` (the cluster file a
    process loads names both: it is in the cluster). Empty secrets are ignored."""
    if not secret:
        return
    with _SECRETS_LOCK:
        for address in addresses:
            _SECRETS[address] = secret_key(secret)


def sign_request(secret: str | bytes, method: str, body: bytes,
                 now_ms: int | None = None) -> list[tuple[str, str]]:
    """The call metadata proving knowledge of the cluster secret for this request."""
    ts = str(clock.now_ms() if now_ms is None else now_ms)
    mac = hmac.new(secret_key(secret), method.encode() + b"\n" + ts.encode() + b"\n"
                   + hashlib.sha256(body).digest(), hashlib.sha256).hexdigest()
    return [(_TS_KEY, ts), (_MAC_KEY, mac)]


def verify_request(secret: str | bytes, method: str, body: bytes,
                   metadata: Iterable[tuple[str, Any]], now_ms: int | None = None) -> str | None:
    """Why the request is refused, or None when it is signed with ``secret``."""
    got = {k: v for k, v in metadata}
    ts, mac = got.get(_TS_KEY), got.get(_MAC_KEY)
    if not isinstance(ts, str) or not isinstance(mac, str) or not ts.isdigit():
        return f"{method} is for cluster members: the request is not signed"
    now = clock.now_ms() if now_ms is None else now_ms
    if abs(now - int(ts)) > MAX_SKEW_S * 1000:
        return f"{method}: the request's timestamp is more than {MAX_SKEW_S:g}s off"
    expected = sign_request(secret, method, body, int(ts))[1][1]
    if not hmac.compare_digest(expected, mac):
        return f"{method}: bad signature (not this cluster's secret)"
    return None
