"""``python -m tidemark ...``, and the spark-submit entry point of the queues job.

spark-submit runs this file as a script, so the package may not be importable yet: when it is
not, the source checkout that holds this file is put on ``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tidemark  # noqa: F401 - probe
except ModuleNotFoundError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tidemark.console import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
