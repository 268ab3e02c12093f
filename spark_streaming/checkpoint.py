"""Where the queues job keeps its checkpoint when none is given."""

from __future__ import annotations

import re
from pathlib import Path

from tidemark.log.settings import Settings, default_state_dir

__all__ = ["default_checkpoint"]


def default_checkpoint(settings: Settings, state_dir: str | None) -> Path:
    """``<state dir>/spark/<topic prefix>checkpoint``: one checkpoint per topic set."""
    base = Path(state_dir).resolve() if state_dir else default_state_dir()
    prefix = re.sub(r"[^A-Za-z0-9_.-]", "_", settings.topic_prefix)
    return base / "spark" / f"{prefix}checkpoint"
