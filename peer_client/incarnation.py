"""Incarnations bound to their peer: a sender can only use message ids of its own.

A message id is ``<incarnation>-<n>``. The incarnation is not random alone: it is the first 16
hex digits of ``SHA-256(environment, peer id, nonce)`` with a random 128-bit nonce, and a direct
batch carries the nonce. A receiver that knows the sender from its certificate recomputes the
incarnation and accepts only ids under it, so no peer can make up ids that collide with
another's (finding one would take a 64-bit second preimage), and dedup, acks and failure counts
keyed by id cannot be poisoned across senders.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import Any

__all__ = ["new_incarnation", "incarnation_of", "ids_owned", "sender_refusal"]


def incarnation_of(environment: str, peer_id: str, nonce: str) -> str:
    """The incarnation that ``nonce`` gives ``peer_id`` of ``environment``."""
    digest = hashlib.sha256(f"{environment}\0{peer_id}\0{nonce}".encode()).hexdigest()
    return digest[:16]


def new_incarnation(environment: str, peer_id: str) -> tuple[str, str]:
    """A fresh ``(incarnation, nonce)``."""
    nonce = secrets.token_hex(16)
    return incarnation_of(environment, peer_id, nonce), nonce


def ids_owned(environment: str, sender: str, incarnation: str, nonce: str,
              message_ids: list[str]) -> bool:
    """True if ``incarnation`` is ``sender``'s by ``nonce`` and every id is under it."""
    if not nonce or incarnation_of(environment, sender, nonce) != incarnation:
        return False
    prefix = incarnation + "-"
    return all(i.startswith(prefix) for i in message_ids)


def sender_refusal(batch: Mapping[str, Any], caller_peer: str, caller_environment: str
                   ) -> str | None:
    """Why a direct ``batch`` from the certified peer ``caller_peer`` of
    ``caller_environment`` is refused (None: accepted): it claims another sender or
    environment, or ids that are not under that sender's incarnation."""
    sender, env = batch.get("sender"), batch.get("environment")
    if sender != caller_peer or env != caller_environment:
        return (f"the batch claims sender {sender!r} of {env!r}; the caller's certificate"
                f" says {caller_peer!r} of {caller_environment!r}")
    ids = [m["message_id"] for m in batch.get("messages") or ()]
    if ids and not ids_owned(caller_environment, caller_peer,
                             str(batch.get("sender_incarnation", "")),
                             str(batch.get("sender_nonce", "")), ids):
        return f"message ids not under {caller_peer!r}'s own incarnation"
    return None
