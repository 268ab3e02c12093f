"""``bench catchup``'s verdict and text (pure: a result document in)."""

from __future__ import annotations

import copy
from typing import Any

from tidemark.demo.catchup_bench import check_targets, render

RUN: dict[str, Any] = {
    "peer": "bench-catchup-daf11a", "partition": 0,
    "options": {"rate": 1000.0, "senders": 2, "window": 1000, "live_s": 5.0, "down_s": 60.0,
                "after_s": 5.0, "dedup": False, "handler_ms": 0.0},
    "achieved_rate": 998.1, "down_s": 60.0, "sent_while_down": 59_886,
    "backlog_records": 60_012, "normal_reached": True, "normal_under_traffic": True,
    "traffic_stopped_s": 14.4, "time_to_normal_s": 9.4,
    "time_to_normal_from_start_call_s": 8.1, "time_to_normal_sampled_s": 9.5,
    "stages_s": {"replay": 1.4, "handover": 6.0, "normal": 9.4},
    "held": {"peak_messages": 4_000, "peak_bytes": 52_000, "limit_messages": 10_000,
             "limit_bytes": 67_108_864, "refused": 0, "within_bound": True},
    "rss": {"sampled": True, "rss_peak_mib": 100.2, "hwm_mib": 100.4, "samples": 40},
    "replayed": 55_000, "forwarded": 9_000,
    "replay": {"barrier": 25_577, "replay_ms": 4_000.0, "handover_ms": 3_000.0},
    "sent": 70_000, "lost": 0, "applied_twice": 0, "twice_same_incarnation": 0,
    "twice_after_ack": 0, "redelivered_after_crash": 13, "out_of_order": 0,
    "raw_records": 60_012, "raw_seconds": 0.31, "raw_records_per_s": 193_587, "ratio": 30.3,
    "cpu": {"window_s": 9.4, "cores": {"peer": 0.9, "machine": 1.9}},
    "load_before": [1.0, 1.2, 1.1], "load_after": [2.0, 1.5, 1.2], "cores": 2,
    "target_normal_s": 15.0, "misses": [],
}


def test_a_run_within_the_targets_misses_none() -> None:
    assert check_targets(RUN) == []
    text = render(RUN)
    assert "9.4 s from the process start, 8.1 s from Peer.start() (meets target <= 15 s" in text
    assert "time to normal / raw = 30.3" in text
    assert "peak 4,000 messages" in text and "within its bound" in text
    assert "redelivered after the crash 13" in text and "targets missed" not in text


def test_each_target_missed_is_named() -> None:
    slow = {**RUN, "time_to_normal_s": 15.5}
    assert check_targets(slow) == ["time to normal 15.5 s > 15.0 s"]
    assert "MISSES target" in render({**slow, "misses": check_targets(slow)})
    beyond = copy.deepcopy(RUN)
    beyond["held"].update(peak_messages=10_001, within_bound=False)
    assert check_targets(beyond)[0].startswith("held back 10001 messages")
    unknown = copy.deepcopy(RUN)
    unknown["held"].update(limit_messages=None, within_bound=None)
    assert check_targets(unknown) == ["held-back bound not reported by the peer"]
    assert "no limit reported" in render(unknown)
    bad = {**RUN, "lost": 2, "applied_twice": 1, "normal_reached": False,
           "time_to_normal_s": None}
    assert len(check_targets(bad)) == 3
    late = {**RUN, "normal_under_traffic": False, "traffic_stopped_s": 300.2,
            "time_to_normal_s": 340.5}
    assert check_targets(late)[0].startswith("not normal while the traffic went on (stopped"
                                             " 300.2 s after the restart; normal after 340.5")
    assert "NOT under the traffic: the senders stopped 300.2 s after" in render(late)
