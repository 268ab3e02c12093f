"""Errors of the gossip package."""

from __future__ import annotations

from log.exceptions import TidemarkError

__all__ = ["GossipError", "EpochError", "NodeUnreachableError", "DurabilityTimeoutError"]


class GossipError(TidemarkError):
    """A gossip operation failed."""


class NodeUnreachableError(GossipError):
    """No replica node answered."""


class EpochError(GossipError):
    """A config change is invalid or lost to a competing one."""


class DurabilityTimeoutError(GossipError):
    """A record did not reach the requested durability level before the deadline."""
