"""The Tidemark application: the ``tidemark`` console script and the local stack.

This is the composition root. The components (``log``, ``gossip``, ``replica``,
``spark_streaming``, ``peer_client``) export plain functions and classes and never import this
package; it wires them into commands (:mod:`tidemark.commands`) and starts them as processes
of a local stack (:mod:`tidemark.stack`). Importing the package loads none of that (a peer
process started as ``python -m tidemark.demo.peer_proc`` does not pay for the whole CLI):
``main`` and ``build_parser`` are loaded on first use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# gRPC's C core writes plain-text lines to stderr (a failed TLS handshake at INFO): keep the
# process's logs JSON and quiet by default; an explicit GRPC_VERBOSITY wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

if TYPE_CHECKING:
    from tidemark.console import build_parser, main

__all__ = ["main", "build_parser"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tidemark import console
        return getattr(console, name)
    raise AttributeError(f"module 'tidemark' has no attribute {name!r}")
