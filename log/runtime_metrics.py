"""The Prometheus metrics every Tidemark process exports about itself: process (RSS, CPU,
open fds...), platform and Python GC, in a registry of the process's own (replica nodes, the
queues job and peers serving ``/metrics`` each start from it)."""

from __future__ import annotations

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)

__all__ = ["runtime_registry"]


def runtime_registry(auto_describe: bool = True) -> CollectorRegistry:
    """A new registry holding the process, platform and Python GC collectors."""
    registry = CollectorRegistry(auto_describe=auto_describe)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    if GC_COLLECTOR is not None:  # None where the interpreter has no gc.get_stats
        GCCollector(registry=registry)
    return registry
