"""Avro schemas (.avsc): the single source of every Tidemark record shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_DIR", "SCHEMA_NAMES", "load_schema", "load_all", "load_history"]

SCHEMA_DIR = Path(__file__).resolve().parent

#: Record types in dependency order (NodeState refers to nothing outside itself).
SCHEMA_NAMES = (
    "Send", "Ack", "Purge", "QueueEntry", "QueueProgress",
    "PeerDescriptor", "ClusterConfig", "NodeState", "DeliveryFailed", "DirectBatch",
    "DirectReceipt", "AckBatch",
)

#: Earlier versions of evolved schemas, still accepted as writer schemas: (name, file stem).
HISTORY = (("Send", "Send.v1"), ("PeerDescriptor", "PeerDescriptor.v1"),
           ("DirectBatch", "DirectBatch.v1"), ("DirectBatch", "DirectBatch.v2"),
           ("AckBatch", "AckBatch.v1"), ("AckBatch", "AckBatch.v2"),
           ("Purge", "Purge.v1"), ("Purge", "Purge.v2"),
           ("DeliveryFailed", "DeliveryFailed.v1"), ("DeliveryFailed", "DeliveryFailed.v2"))


def load_schema(name: str) -> dict[str, Any]:
    """The JSON of `schemas/<name>.avsc`."""
    return json.loads((SCHEMA_DIR / f"{name}.avsc").read_text())


def load_all() -> dict[str, dict[str, Any]]:
    """Every schema by short name."""
    return {name: load_schema(name) for name in SCHEMA_NAMES}


def load_history() -> list[tuple[str, dict[str, Any]]]:
    """``(name, schema JSON)`` of every earlier version in ``schemas/history``."""
    return [(name, json.loads((SCHEMA_DIR / "history" / f"{stem}.avsc").read_text()))
            for name, stem in HISTORY]
