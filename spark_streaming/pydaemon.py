"""Python worker daemon for the queues job (``spark.python.daemon.module``).

PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task, and on
Python 3.10+ that makes each ``zipimporter`` on ``sys.path`` re-read its archive's directory
in pure Python. The worker's path always holds ``pyspark.zip``, py4j's zip and the
``spark-core`` jar (5,000+ entries): measured at 100-250 ms of CPU per task, more than the
job's own per-task work, on every task of every micro-batch. Archives do not change while a
worker lives, so here a zipimporter re-reads its directory only if its file's size or mtime
changed; everything else is PySpark's own daemon, unchanged.
"""

from __future__ import annotations

import os
import zipimport

_original = zipimport.zipimporter.invalidate_caches
_seen: dict[str, tuple[int, int]] = {}


def _invalidate_if_changed(self: zipimport.zipimporter) -> None:
    try:
        st = os.stat(self.archive)
        stamp = (st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = (-1, -1)
    if _seen.get(self.archive) != stamp:
        _seen[self.archive] = stamp
        _original(self)


zipimport.zipimporter.invalidate_caches = _invalidate_if_changed  # type: ignore[method-assign]

if __name__ == "__main__":
    from pyspark.daemon import manager
    manager()
