"""The security comparison's pure decisions: round order, ratios read "higher is better"
for throughput and latency alike, a miss says so, a skipped comparison says why."""

from __future__ import annotations

from tidemark.bench.security import (
    compare_latency,
    compare_throughput,
    round_modes,
    side_by_side,
    skipped,
)
from tidemark.stack.replicas import insecure_env


def test_rounds_alternate_starting_secure() -> None:
    assert round_modes(2) == [False, True, False, True]
    assert round_modes(0) == [False, True]


def test_throughput_ratio_is_secure_over_insecure() -> None:
    r = compare_throughput([90.0, 100.0, 95.0], [100.0, 100.0, 120.0])
    assert r["security_ratio"] == 0.95 and r["security_met"] is True
    assert r["security"]["secure"] == 95 and r["security"]["insecure"] == 100
    miss = compare_throughput([80.0], [100.0])
    assert miss["security_met"] is False
    assert "MISSES" in side_by_side(miss, "msgs/s")[-1]


def test_latency_ratio_is_insecure_over_secure_p99() -> None:
    r = compare_latency(110.0, 100.0, [110.0], [100.0])
    assert r["security_ratio"] == 0.909 and r["security_met"] is True
    assert compare_latency(120.0, 100.0, [], [])["security_met"] is False
    assert compare_latency(float("nan"), 100.0, [], [])["security_ratio"] is None


def test_skipped_says_why() -> None:
    r = skipped("--no-security-compare")
    assert r["security_ratio"] is None and r["security_met"] is None
    assert "--no-security-compare" in side_by_side(r, "msgs/s")[0]


def test_insecure_env_adds_and_removes_only_the_flag() -> None:
    assert insecure_env({"A": "1"}, True) == {"A": "1", "TIDEMARK_INSECURE": "1"}
    assert insecure_env({"A": "1", "TIDEMARK_INSECURE": "1"}, False) == {"A": "1"}


def test_ack_rounds_alternate_and_compare_medians() -> None:
    """bench replay's ack rounds: by id and by range alternate, the first mode swapping
    every pair; range / by id of the medians (rates, and machine CPU per message)."""
    from tidemark.demo.replay_bench import ack_modes, compare_acks
    assert ack_modes(4) == [False, True, True, False] and ack_modes(0) == []

    def rounds(*pairs: tuple[int, float]) -> list[dict]:
        return [{"peer_msgs_per_s": rate, "cpu": {"us_per_msg": {"machine": us}}}
                for rate, us in pairs]
    r = compare_acks(rounds((100, 40.0), (120, 30.0)), rounds((130, 30.0), (100, 20.0)), 9)
    assert r["compared"] and r["messages"] == 9
    assert r["rate_ratio"] == 1.045 and r["machine_us_ratio"] == 0.714  # 115/110, 25/35
    assert compare_acks([], rounds((1, 1.0)), 9)["compared"] is False
