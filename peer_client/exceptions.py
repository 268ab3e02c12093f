"""Errors of the peer client."""

from __future__ import annotations

from log.exceptions import TidemarkError

__all__ = ["PeerClientError", "WrongEnvironmentError"]


class PeerClientError(TidemarkError):
    """Base of the peer client's errors."""


class WrongEnvironmentError(PeerClientError):
    """A message or registration came from a peer of another environment."""
