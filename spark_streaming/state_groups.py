"""How txlog partitions map to the job's state groups, fixed for the life of a checkpoint.

The stateful step runs once per state group and micro-batch: one pandas frame, one task-side
setup, and its own round trips to the JVM's state server. Grouping by txlog partition made a
batch pay that twelve times on a 12-partition txlog even when it held a few hundred rows;
the state server's round trips, not the rows, then dominated small batches on a busy machine.
A group is therefore ``txlog partition % groups``, with as many groups as state partitions
(one per local core) by default. A peer's records all live in one txlog partition, so every
peer still lives in exactly one group.

Spark keys the state store by the grouping key, so the count must never change under an
existing checkpoint: it is written next to a local checkpoint (:data:`MARKER`) the first
time and read back on every later start. A checkpoint written before groups existed (no
marker, batches already planned) used one group per txlog partition, and keeps it. For a
remote checkpoint (``hdfs:``, ``s3a:``, ...), where the marker cannot be kept, the count is
one per txlog partition unless ``--state-groups`` says otherwise, and the operator must give
the same value on every start.
"""

from __future__ import annotations

import re
from pathlib import Path

from tidemark.spark_streaming.exceptions import QueuesError

__all__ = ["MARKER", "choose_groups", "local_checkpoint"]

#: File next to the checkpoint's ``offsets`` folder holding the group count.
MARKER = "tidemark-state-groups"


def local_checkpoint(checkpoint: str) -> Path | None:
    """The checkpoint's local folder, or None for a remote (Hadoop URI) checkpoint."""
    if checkpoint.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", checkpoint) or "/")
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", checkpoint):
        return None
    return Path(checkpoint)


def choose_groups(checkpoint: str, requested: int | None, default: int,
                  partitions: int) -> int:
    """The state group count for ``checkpoint``; records it next to a local checkpoint.

    ``requested``: ``--state-groups`` (None: not given); ``default``: the count for a new
    checkpoint; ``partitions``: txlog's partition count (the layout of older checkpoints).
    """
    if requested is not None and requested < 1:
        raise QueuesError(f"--state-groups must be at least 1, got {requested}")
    folder = local_checkpoint(checkpoint)
    marker = folder / MARKER if folder is not None else None
    if marker is not None and marker.exists():
        text = marker.read_text().strip()
        if not text.isdigit() or int(text) < 1:
            raise QueuesError(f"{marker} holds {text[:40]!r}, not a state group count;"
                              " restore it or start from a new checkpoint")
        stored = int(text)
        if requested is not None and requested != stored:
            raise QueuesError(f"checkpoint {checkpoint} keeps its state in {stored} groups;"
                              f" --state-groups {requested} cannot change that (a new"
                              " checkpoint rebuilds the queues from txlog)")
        return stored
    if requested is not None:
        groups = requested
    elif folder is None or _has_batches(folder):
        groups = partitions
    else:
        groups = max(1, default)
    if marker is not None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{groups}\n")
    return groups


def _has_batches(folder: Path) -> bool:
    """Whether Spark already planned batches in this checkpoint."""
    offsets = folder / "offsets"
    return offsets.is_dir() and any(p.name.isdigit() for p in offsets.iterdir())
