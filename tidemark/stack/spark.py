"""The Spark job as a process of the local stack (``tidemark local up --spark``)."""

from __future__ import annotations

import sys

from tidemark.log import registry
from tidemark.log.settings import load_settings
from tidemark.spark_streaming.checkpoint import default_checkpoint
from tidemark.stack.launcher import LocalStack, ProcessSpec
from tidemark.stack.processes import free_ports

__all__ = ["plan", "metrics_address", "METRICS_FLAG"]

#: The flag of ``tidemark queues run`` that carries the job's metrics port.
METRICS_FLAG = "--metrics-port"


def _metrics_port(argv: list[str]) -> int | None:
    """The port ``argv`` passes with :data:`METRICS_FLAG` (None: none, or 0)."""
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == METRICS_FLAG and value.isdigit() and int(value) > 0:
            return int(value)
    return None


def _recorded(stack: LocalStack) -> ProcessSpec | None:
    """The stack's recorded spark process, if any."""
    specs = stack.processes("spark")
    return specs[0] if specs else None


def plan(stack: LocalStack) -> list[ProcessSpec]:
    """One process of kind ``spark``: ``tidemark queues run`` checkpointing in the state dir.

    The checkpoint is ``<state dir>/spark/<topic prefix>checkpoint``, so a stack whose topic
    prefix changes (``TIDEMARK_TOPIC_PREFIX``) does not reuse another topic set's offsets.
    The stack counts it ready once its streaming query runs (it creates
    ``<state dir>/spark/query-running``): the Spark session and the query take most of a
    minute to start on a busy 2-core machine, and a restarting peer's replay waits for them.
    On a stack of hosts (:class:`~tidemark.stack.hosts.Hosts`) the job runs on a host of its
    own, ``spark``, and serves its metrics on that host's address.

    The job serves Prometheus metrics (``--metrics-port``) on a free port, the same one again
    when a recorded job is started anew (a scrape target that stays put):
    :func:`metrics_address`.
    """
    state = str(stack.state_dir)
    checkpoint = default_checkpoint(load_settings(state_dir=stack.state_dir), state)
    ready = str(stack.state_dir / "spark" / "query-running")
    known = _recorded(stack)
    port = (_metrics_port(known.argv) if known else None) or free_ports(1)[0]
    host = stack.place("spark")
    env = {"TIDEMARK_STATE_DIR": state}
    if host:  # loopback of a host of its own is not reachable from the machine
        env[registry.setting("metrics_host").env] = stack.host_address(host)
    argv = [sys.executable, "-m", "tidemark", "queues", "run", "--state-dir", state,
            "--checkpoint", str(checkpoint), "--trigger", "500ms", "--ready-file", ready,
            METRICS_FLAG, str(port)]
    return [ProcessSpec(name="spark", kind="spark", argv=argv, env=env, ready_file=ready,
                        host=host)]


def metrics_address(stack: LocalStack) -> str | None:
    """``host:port`` of the ``/metrics`` of the stack's queues job: the port its recorded
    command line passes, on the address it serves on as seen from this machine (its host's
    address on a stack of hosts, else 127.0.0.1). None when the stack records no job, or a
    job started without a metrics port. The job need not be running at the moment (a scrape
    target that is down is a finding of its own); ``local status --json`` says whether it is."""
    spec = _recorded(stack)
    port = _metrics_port(spec.argv) if spec else None
    if spec is None or port is None:
        return None
    host = spec.env.get(registry.setting("metrics_host").env, "")
    if host in ("", "0.0.0.0", "::"):
        host = stack.host_address(spec.host)
    return f"{host}:{port}"
