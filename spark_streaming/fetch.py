"""Read a few records back by ``(partition, offset)``: the Sends of earlier batches that a
delivery-count update or a dead letter needs (the job's state keeps offsets, not bytes)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from tidemark.log.consumer import LogConsumer
from tidemark.log.settings import Settings

__all__ = ["read_offsets"]


def read_offsets(settings: Settings, logical_topic: str, wanted: Iterable[tuple[int, int]],
                 timeout_s: float = 30.0) -> dict[tuple[int, int], tuple[bytes | None, bytes]]:
    """``{(partition, offset): (key, value)}`` for each wanted record still in the log.

    One seek per wanted record, in offset order per partition; a record that is gone
    (retention passed it) is left out. Costs a consumer per call: meant for rare records.
    """
    todo = sorted(set(wanted))
    found: dict[tuple[int, int], tuple[bytes | None, bytes]] = {}
    if not todo:
        return found
    with LogConsumer(settings) as consumer:  # auto.offset.reset earliest: a gone record
        # reads as the next one, which tells that it is gone
        for part, offset in todo:
            consumer.assign({(logical_topic, part): offset})
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                msgs = [m for m in consumer.consume_batch(50, 0.5) if m.partition() == part]
                if not msgs:
                    continue
                hit = [m for m in msgs if m.offset() == offset]
                value = hit[0].value() if hit else None
                if value is not None:
                    found[(part, offset)] = (hit[0].key(), value)
                if hit or (msgs[-1].offset() or 0) > offset:
                    break
    return found
