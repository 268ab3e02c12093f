"""``python -m log.inspect``: count what is in txlog by record type, read with a plain consumer."""

from __future__ import annotations

import logging
import sys
from collections import Counter

from tidemark.log.consumer import read_to_end
from tidemark.log.exceptions import CodecError, TidemarkError
from tidemark.log.offsets import watermarks
from tidemark.log.settings import Settings, load_settings
from tidemark.log.wire import default_codec

__all__ = ["count_txlog"]


def count_txlog(settings: Settings) -> tuple[Counter[str], dict[int, int]]:
    """Records per type in txlog (``bad`` for undecodable ones), and the end offsets.

    The lookups ride through the loss of a broker; an unreachable cluster or a missing
    txlog is one :class:`TidemarkError` line."""
    marks = watermarks(settings, "txlog")
    counts: Counter[str] = Counter()
    decode = default_codec().decode
    for msgs in read_to_end(settings, "txlog", marks=marks):
        for msg in msgs:
            try:
                counts[decode(msg.value()).name] += 1
            except CodecError:
                counts["bad"] += 1
    ends = {p: hi for p, (_, hi) in marks.items()}
    return counts, ends


def main() -> int:
    """Print the counts."""
    # librdkafka's connection retries are logged; the outcome is reported as one line below
    logging.getLogger("tidemark.librdkafka").setLevel(logging.CRITICAL)
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
