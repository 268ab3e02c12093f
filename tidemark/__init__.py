"""The Tidemark application: the ``tidemark`` console script and the local stack.

This is the composition root. The components (``log``, ``gossip``, ``replica``,
``spark_streaming``, ``peer_client``) export plain functions and classes and never import this
package; it wires them into commands (:mod:`tidemark.commands`) and starts them as processes
of a local stack (:mod:`tidemark.stack`).
"""

from tidemark.console import build_parser, main

__all__ = ["main", "build_parser"]
