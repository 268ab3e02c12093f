"""Peer credentials: HMAC-signed tokens naming (environment, peer id), and the pure checks.

A token is ``tmk1.<payload>.<mac>`` (both base64url, no padding). The payload is compact JSON
``{"env": E, "peer": P, "iat": ms[, "exp": ms]}``; the MAC is HMAC-SHA256 of
``tmk1.<payload>`` under the **peer-signing key of environment E**, which is derived from the
cluster secret: ``HMAC-SHA256(cluster secret, "tidemark peer token\\n" + E)``. Replica nodes
know the cluster secret, so they can check a token of any environment; peers only get their
own token (``tidemark peer token PEER``), never a key. A token issuer that should not be a
cluster member can be given :func:`peer_signing_key` of one environment only.

:func:`authorize_peer` is the whole decision, pure (no I/O, the time is an argument): it
raises :class:`~tidemark.gossip.exceptions.PeerAuthError` (UNAUTHENTICATED: no token, malformed,
bad signature, expired) or :class:`~tidemark.gossip.exceptions.PeerForbiddenError`
(PERMISSION_DENIED: another environment, another peer) and returns the claims otherwise.
:func:`check_owner` applies the same rule to a pin whose owner is only known deep in the
node (``replica.leases``), through the caller of the gRPC call being served
(:func:`serving_peer`, set by :mod:`tidemark.gossip.service`).
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import hashlib
import hmac
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from tidemark.gossip.exceptions import PeerAuthError, PeerForbiddenError
from tidemark.log import clock, registry
from tidemark.log.exceptions import ConfigError
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.settings import default_state_dir, read_toml

__all__ = ["PeerClaims", "TOKEN_KEY", "peer_signing_key", "issue_token", "parse_token",
           "verify_token", "authorize_peer", "check_owner", "serving_peer", "serving_as",
           "configured_token", "local_stack_token", "LOCAL_CLUSTER_FILE"]

#: The cluster file of the local stack, in its state folder.
LOCAL_CLUSTER_FILE = "cluster.toml"
#: gRPC metadata key carrying the peer token.
TOKEN_KEY = "x-tidemark-peer-token"
_VERSION = "tmk1"
_LABEL = b"tidemark peer token\n"


class PeerClaims(NamedTuple):
    """What a valid token says: who, in which environment, until when (0 = no expiry)."""

    environment: str
    peer: str
    issued_ms: int
    expires_ms: int = 0


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def peer_signing_key(cluster_secret: str | bytes, environment: str) -> bytes:
    """The key peer tokens of ``environment`` are signed with."""
    return hmac.new(_key(cluster_secret), _LABEL + environment.encode(),
                    hashlib.sha256).digest()


def _mac(key: bytes, signed: str) -> str:
    return _b64(hmac.new(key, signed.encode(), hashlib.sha256).digest())


def issue_token(cluster_secret: str | bytes, environment: str, peer: str,
                ttl_ms: int | None = None, now_ms: int | None = None) -> str:
    """A token naming ``peer`` of ``environment`` (expiring ``ttl_ms`` from now if given)."""
    if not peer or not environment:
        raise ValueError("a peer token needs a peer id and an environment")
    now = clock.now_ms() if now_ms is None else now_ms
    doc: dict[str, object] = {"env": environment, "peer": peer, "iat": now}
    if ttl_ms:
        doc["exp"] = now + int(ttl_ms)
    signed = f"{_VERSION}.{_b64(json.dumps(doc, separators=(',', ':'), sort_keys=True).encode())}"
    return f"{signed}.{_mac(peer_signing_key(cluster_secret, environment), signed)}"


def parse_token(token: str) -> tuple[PeerClaims, str, str]:
    """``(claims, signed part, mac)`` of a well-formed token (not verified); raises
    :class:`PeerAuthError` if it is malformed."""
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3 or parts[0] != _VERSION:
        raise PeerAuthError(f"malformed peer token: expected {_VERSION}.<payload>.<mac> "
                            "(from `tidemark peer token PEER`)")
    try:
        doc = json.loads(_unb64(parts[1]))
        claims = PeerClaims(doc["env"], doc["peer"], int(doc["iat"]), int(doc.get("exp", 0)))
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise PeerAuthError("malformed peer token: unreadable payload") from None
    if not isinstance(claims.environment, str) or not isinstance(claims.peer, str) \
            or not claims.peer or not claims.environment:
        raise PeerAuthError("malformed peer token: environment and peer must be strings")
    try:
        claims.environment.encode(), claims.peer.encode()
    except UnicodeEncodeError:
        raise PeerAuthError("malformed peer token: environment and peer must be UTF-8") \
            from None
    return claims, f"{parts[0]}.{parts[1]}", parts[2]


def verify_token(cluster_secret: str | bytes, token: str | None,
                 now_ms: int | None = None) -> PeerClaims:
    """The claims of ``token`` if this cluster signed it and it has not expired; raises
    :class:`PeerAuthError` otherwise."""
    if not token:
        raise PeerAuthError("no peer token: set TIDEMARK_PEER_TOKEN (or "
                            "TIDEMARK_PEER_TOKEN_FILE) to the output of "
                            "`tidemark peer token PEER`")
    claims, signed, mac = parse_token(token)
    expected = _mac(peer_signing_key(cluster_secret, claims.environment), signed)
    if not hmac.compare_digest(expected, mac):
        raise PeerAuthError(f"peer token of {claims.peer!r} ({claims.environment}) is not "
                            "signed by this cluster (bad signature)")
    now = clock.now_ms() if now_ms is None else now_ms
    if claims.expires_ms and now >= claims.expires_ms:
        raise PeerAuthError(f"peer token of {claims.peer!r} ({claims.environment}) expired "
                            f"{(now - claims.expires_ms) / 1000:.0f} s ago")
    return claims


def authorize_peer(cluster_secret: str | bytes, token: str | None, environment: str,
                   peer: str | None = None, what: str = "this call",
                   now_ms: int | None = None) -> PeerClaims:
    """The claims of ``token`` if it lets its holder do ``what`` on ``peer``'s queue (any
    of its own when ``peer`` is None) in ``environment``; raises :class:`PeerAuthError` or
    :class:`PeerForbiddenError`."""
    claims = verify_token(cluster_secret, token, now_ms)
    if claims.environment != environment:
        raise PeerForbiddenError(
            f"{what} refused: the token of {claims.peer!r} is for environment "
            f"{claims.environment!r}, this cluster serves {environment!r}")
    if peer is not None and peer != claims.peer:
        raise PeerForbiddenError(f"{what} refused: peer {claims.peer!r} may not act on the "
                                 f"queue of {peer!r}")
    return claims


# ---- the caller of the call being served -------------------------------------------------
_SERVING: contextvars.ContextVar[PeerClaims | None] = contextvars.ContextVar(
    "tidemark_serving_peer", default=None)


def serving_peer() -> PeerClaims | None:
    """The authenticated peer of the gRPC call this thread serves; None for cluster members
    and for the node's own work."""
    return _SERVING.get()


@contextmanager
def serving_as(claims: PeerClaims | None) -> Iterator[None]:
    """Run the body as serving ``claims`` (the gRPC layer's wrapper)."""
    token = _SERVING.set(claims)
    try:
        yield
    finally:
        _SERVING.reset(token)


def check_owner(owner: str, what: str, new: bool = False) -> str:
    """The owner a peer-facing change may use: the serving peer's own id. Raises
    :class:`PeerForbiddenError` if a peer acts on a pin of another ``owner`` (or of none,
    unless it is creating it: ``new``); returns ``owner`` unchanged when no peer is being
    served (members, the node itself)."""
    caller = serving_peer()
    if caller is None:
        return owner
    if owner != caller.peer and (owner or not new):
        raise PeerForbiddenError(f"{what} refused: peer {caller.peer!r} may not act on the "
                                 f"pin of {owner or 'no peer'!r}")
    return caller.peer


def check_pin_barrier(barrier: Mapping[str, int], partitions: int | None) -> None:
    """A peer being served may pin only its own txlog partition (the one its queue is in):
    raises :class:`PeerForbiddenError` for any other key of ``barrier``. Members and the
    node's own work are unrestricted; so is everything when ``partitions`` is unknown."""
    caller = serving_peer()
    if caller is None or partitions is None:
        return
    own = f"txlog/{partition_for_peer(caller.peer, partitions)}"
    others = sorted(tp for tp in barrier if tp != own)
    if others:
        raise PeerForbiddenError(f"Pin refused: peer {caller.peer!r} may pin only its own"
                                 f" partition {own}, not {', '.join(others)}")


def configured_token(env: Mapping[str, str] | None = None) -> str | None:
    """The peer token of this process's settings: ``TIDEMARK_PEER_TOKEN``, else the content
    of ``TIDEMARK_PEER_TOKEN_FILE``; None if neither is set."""
    token = registry.env_value("peer_token", env)
    if token:
        return str(token).strip()
    path = registry.env_value("peer_token_file", env)
    if path:
        try:
            return Path(path).expanduser().read_text().strip() or None
        except OSError as exc:
            raise PeerAuthError(f"TIDEMARK_PEER_TOKEN_FILE {path}: {exc.strerror}") from None
    return None


def local_stack_token(peer: str, environment: str,
                      state_dir: str | Path | None = None) -> str | None:
    """A token for ``peer`` issued with the secret of the local stack whose state folder is
    ``state_dir`` (default ``TIDEMARK_STATE_DIR``); None if that folder holds no cluster
    file with a secret. The local stack's convenience: a process that can read the stack's
    state folder already holds everything of it, so its peers need no token handed out."""
    path = Path(state_dir if state_dir is not None else default_state_dir()) / \
        LOCAL_CLUSTER_FILE
    if not path.is_file():
        return None
    try:
        secret = read_toml(path).get("cluster", {}).get("secret")
    except (ConfigError, AttributeError):
        return None
    return issue_token(secret, environment, peer) if isinstance(secret, str) and secret \
        else None
