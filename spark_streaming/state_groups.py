"""How txlog partitions map to the job's state groups, fixed for the life of a checkpoint.

The stateful step runs once per state group and micro-batch: one pandas frame, one task-side
setup, and its own round trips to the JVM's state server. Grouping by txlog partition made a
batch pay that twelve times on a 12-partition txlog even when it held a few hundred rows;
the state server's round trips, not the rows, then dominated small batches on a busy machine.
A group is therefore ``txlog partition % groups``, with as many groups as state partitions
(one per local core) by default. A peer's records all live in one txlog partition, so every
peer still lives in exactly one group.

Each group has a *key*, the value of the grouping column. Spark sends a key to the state
partition its hash picks, so the keys ``0`` and ``1`` both land in one of two partitions and
both groups run in one task, one after the other. A new local checkpoint therefore takes
*spread* keys: for group ``g``, the smallest key Spark's hash sends to state partition
``g % partitions`` (:func:`spread_keys`; the job asks Spark itself where a key goes).

Spark keys the state store by the grouping key, so neither the count nor the keys may ever
change under an existing checkpoint: both are written next to a local checkpoint
(:data:`MARKER`) the first time and read back on every later start. A marker holding only a
count (written before keys were spread) keeps the keys ``0 .. count-1``. A checkpoint written
before groups existed (no marker, batches already planned) used one group per txlog
partition, and keeps it. For a remote checkpoint (``hdfs:``, ``s3a:``, ...), where the marker
cannot be kept, the count is one per txlog partition unless ``--state-groups`` says otherwise
(the operator must give the same value on every start), with the keys ``0 .. count-1``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tidemark.spark_streaming.exceptions import QueuesError

__all__ = ["MARKER", "SPREAD_CANDIDATES", "GroupLayout", "choose_groups", "local_checkpoint",
           "spread_keys"]

#: File next to the checkpoint's ``offsets`` folder holding the group count (and keys).
MARKER = "tidemark-state-groups"
#: Candidate keys :func:`spread_keys` looks through (``0 .. SPREAD_CANDIDATES-1``).
SPREAD_CANDIDATES = 256


@dataclass(frozen=True)
class GroupLayout:
    """``count`` state groups (txlog partition % count); group ``g``'s grouping key is
    ``keys[g]``."""

    count: int
    keys: tuple[int, ...]

    @property
    def plain(self) -> bool:
        """Whether the keys are the group numbers themselves (``0 .. count-1``)."""
        return self.keys == tuple(range(self.count))


def spread_keys(count: int, partition_of: Mapping[int, int], partitions: int
                ) -> tuple[int, ...]:
    """Keys for ``count`` groups such that group ``g`` lands in state partition ``g %
    partitions``: for each group, the smallest unused candidate key that ``partition_of``
    (key -> the state partition Spark sends it to) maps there. The plain keys if some
    partition has no candidate left."""
    keys: list[int] = []
    for group in range(count):
        key = next((k for k in sorted(partition_of)
                    if partition_of[k] == group % partitions and k not in keys), None)
        if key is None:
            return tuple(range(count))
        keys.append(key)
    return tuple(keys)


def local_checkpoint(checkpoint: str) -> Path | None:
    """The checkpoint's local folder, or None for a remote (Hadoop URI) checkpoint."""
    if checkpoint.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", checkpoint) or "/")
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", checkpoint):
        return None
    return Path(checkpoint)


def choose_groups(checkpoint: str, requested: int | None, default: int, partitions: int,
                  spread: Callable[[int], tuple[int, ...]] | None = None) -> GroupLayout:
    """The state groups of ``checkpoint``; records them next to a local checkpoint.

    ``requested``: ``--state-groups`` (None: not given); ``default``: the count for a new
    checkpoint; ``partitions``: txlog's partition count (the layout of older checkpoints);
    ``spread``: the keys of ``count`` groups for a new local checkpoint (None: plain keys).
    """
    if requested is not None and requested < 1:
        raise QueuesError(f"--state-groups must be at least 1, got {requested}")
    folder = local_checkpoint(checkpoint)
    marker = folder / MARKER if folder is not None else None
    if marker is not None and marker.exists():
        stored = _read_marker(marker)
        if requested is not None and requested != stored.count:
            raise QueuesError(f"checkpoint {checkpoint} keeps its state in {stored.count}"
                              f" groups; --state-groups {requested} cannot change that (a new"
                              " checkpoint rebuilds the queues from txlog)")
        return stored
    planned = folder is not None and _has_batches(folder)
    if requested is not None:
        groups = requested
    elif folder is None or planned:
        groups = partitions
    else:
        groups = max(1, default)
    keys = tuple(range(groups))
    if marker is not None and spread is not None and groups < partitions and not planned:
        keys = spread(groups)
    layout = GroupLayout(groups, keys)
    if marker is not None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        text = f"{groups}\n" if layout.plain else \
            f"{groups}\nkeys {' '.join(map(str, keys))}\n"
        marker.write_text(text)
    return layout


def _read_marker(marker: Path) -> GroupLayout:
    """The layout a marker holds: a count, then optionally ``keys k0 k1 ...``."""
    lines = marker.read_text().strip().splitlines() or [""]
    text = lines[0].strip()
    if not text.isdigit() or int(text) < 1:
        raise QueuesError(f"{marker} holds {text[:40]!r}, not a state group count;"
                          " restore it or start from a new checkpoint")
    count = int(text)
    if len(lines) < 2:
        return GroupLayout(count, tuple(range(count)))
    words = lines[1].split()
    if words[:1] != ["keys"] or len(words) != count + 1 \
            or not all(w.isdigit() for w in words[1:]) or len(set(words[1:])) != count:
        raise QueuesError(f"{marker} holds {lines[1][:60]!r}, not the keys of {count}"
                          " state groups; restore it or start from a new checkpoint")
    return GroupLayout(count, tuple(int(w) for w in words[1:]))


def _has_batches(folder: Path) -> bool:
    """Whether Spark already planned batches in this checkpoint."""
    offsets = folder / "offsets"
    return offsets.is_dir() and any(p.name.isdigit() for p in offsets.iterdir())
