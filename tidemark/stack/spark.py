"""The Spark job as a process of the local stack (``tidemark local up --spark``)."""

from __future__ import annotations

import sys

from tidemark.log.settings import load_settings
from tidemark.spark_streaming.checkpoint import default_checkpoint
from tidemark.stack.launcher import LocalStack, ProcessSpec

__all__ = ["plan"]


def plan(stack: LocalStack) -> list[ProcessSpec]:
    """One process of kind ``spark``: ``tidemark queues run`` checkpointing in the state dir.

    The checkpoint is ``<state dir>/spark/<topic prefix>checkpoint``, so a stack whose topic
    prefix changes (``TIDEMARK_TOPIC_PREFIX``) does not reuse another topic set's offsets.
    The stack counts it ready once its streaming query runs (it creates
    ``<state dir>/spark/query-running``): the Spark session and the query take most of a
    minute to start on a busy 2-core machine, and a restarting peer's replay waits for them.
    On a stack of hosts (:class:`~tidemark.stack.hosts.Hosts`) the job runs on a host of its
    own, ``spark``.
    """
    state = str(stack.state_dir)
    checkpoint = default_checkpoint(load_settings(state_dir=stack.state_dir), state)
    ready = str(stack.state_dir / "spark" / "query-running")
    argv = [sys.executable, "-m", "tidemark", "queues", "run", "--state-dir", state,
            "--checkpoint", str(checkpoint), "--trigger", "500ms", "--ready-file", ready]
    return [ProcessSpec(name="spark", kind="spark", argv=argv,
                        env={"TIDEMARK_STATE_DIR": state}, ready_file=ready,
                        host=stack.place("spark"))]
