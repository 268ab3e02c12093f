"""``python -m log.inspect``: count what is in txlog by record type, read with a plain consumer."""

from __future__ import annotations

import sys
from collections import Counter

from log.consumer import LogConsumer
from log.exceptions import CodecError, TidemarkError
from log.offsets import end_offsets
from log.settings import Settings, load_settings

__all__ = ["count_txlog"]


def count_txlog(settings: Settings) -> tuple[Counter, dict[int, int]]:
    """Records per type in txlog (``bad`` for undecodable ones), and the end offsets."""
    ends = end_offsets(settings, "txlog")
    consumer = LogConsumer(settings)
    consumer.assign({("txlog", p): 0 for p in ends})
    counts: Counter = Counter()
    remaining = {p: o for p, o in ends.items() if o > 0}
    idle = 0
    while remaining and idle < 40:
        batch = consumer.consume_batch(10000, 0.25)
        idle = 0 if batch else idle + 1
        for msg in batch:
            try:
                counts[consumer.decode(msg).name] += 1
            except CodecError:
                counts["bad"] += 1
            if msg.offset() + 1 >= remaining.get(msg.partition(), 0):
                remaining.pop(msg.partition(), None)
    consumer.close()
    return counts, ends


def main() -> int:
    """Print the counts."""
    try:
        counts, ends = count_txlog(load_settings())
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 1
    total = sum(ends.values())
    print(f"txlog holds {total} records in {len(ends)} partitions: "
          + ", ".join(f"{n} {c}" for n, c in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
