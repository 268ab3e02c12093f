"""Errors of the application package (each is one ``tidemark: error:`` line)."""

from __future__ import annotations

from tidemark.log.exceptions import ClusterLaunchError, TidemarkError

__all__ = ["StackError", "ClusterLaunchError"]


class StackError(TidemarkError):
    """The local stack cannot do what was asked (unknown process, bad layout...)."""
