"""Who may call which replica method, decided from the caller's certificate (pure).

With mutual TLS the caller's identity is its certificate's (:mod:`tidemark.gossip.pki`), so
no token or signature is read from the request: :func:`admit` is the whole decision.

- ``Gossip``: replica nodes only (a node speaks for itself: the gossip handler also checks
  that the state it receives is the caller's own).
- ``Status``, ``Digest`` and ``Fetch`` (backfill, diagnostics): nodes and operators.
- ``Replay``, ``Pin``, ``RenewPin``, ``Unpin``: a peer of the node's environment acting on its
  own queue (the handler checks the queue's owner through :func:`serving_peer`), nodes and
  operators.
- ``WaitApplied``, ``WaitStable``, ``Watch``: any peer of the environment, nodes, operators.
- Anything else: nodes and operators.
"""

from __future__ import annotations

from tidemark.gossip.cluster_auth import PEER_METHODS, WAIT_METHODS
from tidemark.gossip.exceptions import PeerAuthError, PeerForbiddenError
from tidemark.gossip.peer_auth import PeerClaims
from tidemark.gossip.pki import Identity

__all__ = ["admit", "NODE_ONLY"]

#: Methods only another replica node may call.
NODE_ONLY = frozenset({"Gossip"})


def admit(method: str, caller: Identity | None, environment: str) -> PeerClaims | None:
    """The peer ``caller`` acts as (None: a node or an operator) if it may call ``method`` on a
    node serving ``environment``; raises :class:`PeerAuthError` (no identity) or
    :class:`PeerForbiddenError`."""
    if caller is None:
        raise PeerAuthError(f"{method} refused: the caller presented no certificate")
    if caller.kind == "node":
        return None
    if method in NODE_ONLY:
        raise PeerForbiddenError(f"{method} refused: only replica nodes may call it, not"
                                 f" {caller}")
    if caller.kind == "operator":
        return None
    if method not in PEER_METHODS and method not in WAIT_METHODS:
        raise PeerForbiddenError(f"{method} refused: peers may not call it ({caller})")
    if not environment or caller.environment != environment:
        raise PeerForbiddenError(f"{method} refused: {caller} is not a peer of this node's"
                                 " environment")
    return PeerClaims(caller.environment, caller.name, 0)
