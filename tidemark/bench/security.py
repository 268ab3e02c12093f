"""What mutual TLS costs a bench: the secure side (the default, TLS from the stack's CA)
against the insecure one (``PeerOptions(insecure=True)``; replica nodes serving plaintext
where the bench goes through them), measured in alternating rounds of the same run.

Pure decisions only: the order of the rounds, and the comparison of the two sides with its
verdict. ``security_ratio`` reads the same way for every bench, higher is better and
:data:`TARGET_RATIO` (0.9) is "security costs at most 10 %":

* throughput benches (``bench send``, ``bench replay``): secure / insecure msgs/s (medians
  of each side's rounds);
* latency benches (``bench stable``): insecure / secure p99 (each side's latencies pooled
  over its rounds), so 0.9 means the secure p99 is at most 1 / 0.9 = 1.11 times the
  insecure one.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["TARGET_RATIO", "SECURE", "INSECURE", "round_modes", "compare_throughput",
           "compare_latency", "skipped", "side_by_side"]

#: security_ratio at or above this: security costs no more than 10 %.
TARGET_RATIO = 0.9
SECURE, INSECURE = "secure", "insecure"


def round_modes(pairs: int) -> list[bool]:
    """Whether each round runs insecure: secure, insecure, secure, ... (``pairs`` of each,
    at least one), so neither side gets only the machine's good or bad moments."""
    return [r % 2 == 1 for r in range(2 * max(1, pairs))]


def _verdict(ratio: float | None, measure: str, ratio_is: str,
             secure: float, insecure: float, rounds: dict[str, list[float]]
             ) -> dict[str, Any]:
    return {"security_ratio": ratio, "security_target_ratio": TARGET_RATIO,
            "security_met": None if ratio is None else ratio >= TARGET_RATIO,
            "security": {"compared": True, "measure": measure, "ratio_is": ratio_is,
                         SECURE: secure, INSECURE: insecure,
                         "secure_rounds": rounds[SECURE], "insecure_rounds": rounds[INSECURE]}}


def compare_throughput(secure: Sequence[float], insecure: Sequence[float]
                       ) -> dict[str, Any]:
    """The fields of a throughput bench: medians of each side's rounds (msgs/s), ratio
    secure / insecure."""
    s, i = statistics.median(secure), statistics.median(insecure)
    ratio = round(s / i, 3) if i > 0 else None
    return _verdict(ratio, "msgs_per_s", "secure / insecure msgs/s (median of rounds)",
                    round(s), round(i), {SECURE: [round(x) for x in secure],
                                         INSECURE: [round(x) for x in insecure]})


def compare_latency(secure_p99_ms: float, insecure_p99_ms: float,
                    secure_rounds: Sequence[float], insecure_rounds: Sequence[float]
                    ) -> dict[str, Any]:
    """The fields of a latency bench: each side's p99 (ms, its latencies pooled over its
    rounds), ratio insecure / secure; ``*_rounds``: each round's own p99."""
    ok = secure_p99_ms > 0 and secure_p99_ms == secure_p99_ms  # not NaN
    ratio = round(insecure_p99_ms / secure_p99_ms, 3) if ok else None
    return _verdict(ratio, "p99_ms", "insecure / secure p99 (pooled over rounds)",
                    secure_p99_ms, insecure_p99_ms,
                    {SECURE: list(secure_rounds), INSECURE: list(insecure_rounds)})


def skipped(reason: str) -> dict[str, Any]:
    """The fields when the comparison did not run (``--no-security-compare``, no stack)."""
    return {"security_ratio": None, "security_target_ratio": TARGET_RATIO,
            "security_met": None, "security": {"compared": False, "reason": reason}}


def side_by_side(result: dict[str, Any], unit: str) -> list[str]:
    """The human-readable lines: both sides, the ratio, the target and the verdict (a miss
    says so)."""
    sec = result.get("security") or {}
    if not sec.get("compared"):
        return [f"security (TLS) vs --insecure: not compared ({sec.get('reason', '?')})"]
    ratio = result["security_ratio"]
    verdict = ("meets" if result["security_met"] else "MISSES") if ratio is not None else "n/a"
    fmt = (lambda v: f"{v:,}") if unit == "msgs/s" else (lambda v: f"{v}")
    return [f"secure (mutual TLS)  : {fmt(sec[SECURE]):>10} {unit}   rounds"
            f" {sec['secure_rounds']}",
            f"insecure (--insecure): {fmt(sec[INSECURE]):>10} {unit}   rounds"
            f" {sec['insecure_rounds']}",
            f"security_ratio {ratio} ({sec['ratio_is']}): {verdict} target >="
            f" {result['security_target_ratio']} (security costs at most 10 %)"]
