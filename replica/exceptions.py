"""Errors raised by replica nodes; each message is one readable line for the CLI."""

from __future__ import annotations

from tidemark.gossip.exceptions import NodeUnreachableError
from tidemark.log.exceptions import ConfigError, TidemarkError

__all__ = ["ReplicaError", "StoreError", "ClusterConfigError", "NodeUnreachableError"]


class ReplicaError(TidemarkError):
    """A replica node failed."""


class StoreError(ReplicaError):
    """The LevelDB store is corrupt, locked, or belongs to another node."""


class ClusterConfigError(ConfigError):
    """The cluster TOML or a ClusterConfig epoch is invalid."""
