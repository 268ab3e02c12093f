"""The producer benches' warm-up (``tidemark.bench.produce.warm_up``): it ends when the sides'
rates settle and, given a probe, only once the brokers' JIT compilers are quiet."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from tidemark.bench.produce import JIT_KEY, JIT_QUIET_CORES, MAX_JIT_WARM_UP_ROUNDS, warm_up
from tidemark.stack.settle import broker_jit_probe, jit_seconds


def _steady(rate: float) -> Callable[[], float]:
    def run() -> float:
        time.sleep(0.002)  # a round takes time, so cores are CPU seconds over wall seconds
        return rate
    return run


def _compilers(busy_rounds: int) -> Callable[[], float]:
    """A JIT probe whose compilers use a whole core during the first ``busy_rounds`` rounds
    (each round reads it twice) and nothing afterwards."""
    reads, seconds, started = [0], [0.0], [time.perf_counter()]

    def probe() -> float:
        reads[0] += 1
        now = time.perf_counter()
        if reads[0] % 2 == 0 and reads[0] // 2 <= busy_rounds:
            seconds[0] += now - started[0]
        started[0] = now
        return seconds[0]
    return probe


def test_rates_that_agree_end_the_warm_up_without_a_probe() -> None:
    warm = warm_up({"a": _steady(100.0), "b": _steady(50.0)})
    assert len(warm["a"]) == 2 and JIT_KEY not in warm


def test_busy_compilers_keep_the_warm_up_going_until_they_are_quiet() -> None:
    warm = warm_up({"a": _steady(100.0), "b": _steady(50.0)}, jit=_compilers(5))
    assert len(warm["a"]) == 6
    assert all(c > JIT_QUIET_CORES for c in warm[JIT_KEY][:5])
    assert warm[JIT_KEY][5] <= JIT_QUIET_CORES


def test_compilers_that_never_settle_stop_the_warm_up_at_its_bound() -> None:
    warm = warm_up({"a": _steady(100.0)}, jit=_compilers(10_000))
    assert len(warm["a"]) == MAX_JIT_WARM_UP_ROUNDS


def test_the_probe_reads_only_jit_threads_and_none_without_a_local_stack(tmp_path) -> None:
    assert jit_seconds([os.getpid()]) == 0.0  # a Python process has no JIT compiler threads
    assert jit_seconds([2 ** 22 + 12345]) == 0.0  # gone: counts nothing
    assert broker_jit_probe("127.0.0.1:9092", tmp_path) is None  # no stack in that folder
