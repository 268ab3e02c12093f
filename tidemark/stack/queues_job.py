"""Run the queues job as a child process (tests, benchmarks).

:class:`JobProcess` starts ``tidemark queues run`` in its own process group, so that a kill
takes the Python driver, its JVM and the Python workers together.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tidemark.log.settings import Settings
from tidemark.spark_streaming.exceptions import QueuesError
from tidemark.stack.processes import Child

__all__ = ["JobProcess"]


class JobProcess:
    """``tidemark queues run`` against ``settings``' cluster and topics, as a child process."""

    def __init__(self, settings: Settings, checkpoint: str | os.PathLike[str],
                 log_file: str | os.PathLike[str], trigger: str = "500ms",
                 extra_args: list[str] | None = None) -> None:
        self.settings = settings
        self.log_file = Path(log_file)
        self.checkpoint = str(checkpoint)
        self.argv = [sys.executable, "-m", "tidemark", "queues", "run",
                     "--bootstrap", settings.bootstrap, "--topic-prefix", settings.topic_prefix,
                     "--checkpoint", str(checkpoint), "--trigger", trigger, *(extra_args or [])]
        self.env = {**os.environ, **{f"TIDEMARK_KAFKA_{k.upper().replace('.', '_')}": v
                                     for k, v in settings.client.items()}}
        self.child: Child | None = None
        self.started_at = 0.0

    def start(self) -> "JobProcess":
        """Start the job (returns at once; Spark takes seconds to come up)."""
        self.child = Child(self.argv, self.log_file, env=self.env, own_group=True)
        self.started_at = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        """The job's process id (also its process group id); 0 before :meth:`start`."""
        return self.child.pid if self.child is not None else 0

    @property
    def alive(self) -> bool:
        """Whether the job process is still running."""
        return self.child is not None and self.child.alive

    def kill(self) -> None:
        """SIGKILL the whole process group (driver, JVM, Python workers)."""
        if self.child is not None:
            self.child.kill()

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM (the job stops its query cleanly), then SIGKILL after ``grace_s``; Spark's
        helpers that outlive the driver are killed with its process group."""
        return self.child.stop(grace_s) if self.child is not None else None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the job's log, for failure messages."""
        return (self.child.log_tail(lines) if self.child is not None else "") or "(no log)"

    def wait_for_progress(self, timeout_s: float, ends: dict[int, int] | None = None,
                          ) -> dict[int, int]:
        """Wait until queues progress covers ``ends`` (default: txlog's end now); raises
        :class:`QueuesError` with the log's end as soon as the job is gone, or at the deadline."""
        from tidemark.log.offsets import end_offsets
        from tidemark.spark_streaming.depth import ProgressTracker
        ends = {p: e for p, e in (ends or end_offsets(self.settings, "txlog")).items() if e}
        deadline = time.monotonic() + timeout_s
        tracker = ProgressTracker(self.settings)
        try:
            while True:
                progress = tracker.poll(0.5)
                if all(progress.get(p, 0) >= e for p, e in ends.items()):
                    return dict(progress)
                if not self.alive:
                    code = self.child.returncode if self.child is not None else None
                    raise QueuesError(f"the queues job exited ({code}); its log ends with:\n"
                                      f"{self.log_tail()}")
                if time.monotonic() > deadline:
                    behind = {p: (progress.get(p, 0), e) for p, e in ends.items()
                              if progress.get(p, 0) < e}
                    raise QueuesError(f"queues progress did not reach {behind} (partition:"
                                      f" (progress, end)) within {timeout_s}s; log:\n"
                                      f"{self.log_tail()}")
        finally:
            tracker.close()
