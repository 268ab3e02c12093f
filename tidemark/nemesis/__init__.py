"""A Jepsen-style fault-injection harness for Tidemark: the nemesis, the run's history and
its checker.

:mod:`tidemark.nemesis.faults` injects faults on the hosts of a run (network namespaces of
:class:`tidemark.stack.hosts.Hosts`): partitions, isolation, packet loss, clock skew, heal;
:mod:`tidemark.nemesis.history` records one run (nemesis events, confirmed sends, handler
calls, replica samples, acks, the state after healing); :mod:`tidemark.nemesis.checker`
judges it (lost, twice, order, cut, gc, converge). See docs/partitions.md, "The checker".
"""

from tidemark.nemesis.checker import (
    CHECKS,
    Bounds,
    Report,
    Verdict,
    check,
    check_converge,
    check_cut,
    check_gc,
    check_lost,
    check_order,
    check_release,
    check_twice,
)
from tidemark.nemesis.faults import FaultUnavailable, Nemesis
from tidemark.nemesis.history import (
    Confirmed,
    Convergence,
    Event,
    Final,
    FinalPartition,
    Handled,
    History,
    HistoryLog,
    PartitionSample,
    Sample,
    SendAck,
    history_from_lines,
    read_history,
)

__all__ = ["Nemesis", "FaultUnavailable", "CHECKS", "Bounds", "Report", "Verdict", "check",
           "check_converge", "check_cut",
           "check_gc", "check_lost", "check_order", "check_release", "check_twice",
           "Confirmed", "Convergence",
           "Event", "Final", "FinalPartition", "Handled", "History", "HistoryLog",
           "PartitionSample", "Sample", "SendAck", "history_from_lines", "read_history"]
