"""Durability quorum and all against real replica nodes (2x2), their timeout naming the
partition when the partition's replicas are down, and the flight size while they are."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.replicas import replica_stack, status
from tests.support import wait_for
from tidemark.bench.peer import bench_stable
from tidemark.log.partitioner import partition_for_peer
from tidemark.peer_client import PeerOptions, message
from tidemark.peer_client.exceptions import DurabilityTimeoutError, FlightSizeExceededError
from tidemark.peer_client.peer import Peer

pytestmark = pytest.mark.integration


@message("dtest.Tick")
@dataclass
class Tick:
    n: int


def _tidemark(stack, *args: str) -> None:  # noqa: ANN001
    proc = subprocess.run([sys.executable, "-m", "tidemark", *args, "--state-dir",
                           str(stack.state_dir)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _base_end(stack, node: str, tp: str) -> int:  # noqa: ANN001
    doc = status(stack, node) or {}
    row = next((n for n in doc.get("nodes", []) if n["id"] == node), None)
    return row["partitions"][tp]["base"][1] if row and tp in row["partitions"] else -1


def test_quorum_all_timeout_and_flight_size(bootstrap: str, tmp_path: Path) -> None:
    with replica_stack(bootstrap, tmp_path / "stack", "2x2") as stack:
        settings = stack.settings()
        k = partition_for_peer("B", settings.partitions)
        tp, owners = f"txlog/{k}", [f"p{k % 2}r0", f"p{k % 2}r1"]
        opts = PeerOptions(durability_timeout_ms=60_000, flight_size=100)
        with Peer("A", settings.environment, settings, opts) as a:
            h = a.send_nowait("B", Tick(0), "all")
            h.result(60)
            (part, offset), = h.positions
            assert part == k
            ust = (status(stack, owners[0]) or {}).get("ust", {})
            assert ust.get(tp, 0) > offset, "all returned before the stable cut covered it"

            h = a.send_nowait("B", Tick(1), "quorum")
            h.result(60)
            offset = h.positions[0][1]
            for node in owners:
                wait_for(lambda n=node: _base_end(stack, n, tp) > offset, 5, 0.05,
                         f"{node} showing {tp} applied past {offset}")

            for node in owners:
                _tidemark(stack, "local", "kill", node)
            handles = [a.send_nowait("B", Tick(i), "quorum") for i in range(2, 102)]
            assert a._core.flight.in_flight == 100
            blocked: list = []
            t = threading.Thread(target=lambda: blocked.append(
                a.send_nowait("B", Tick(102), "quorum")), daemon=True)
            t.start()
            t.join(2.0)
            assert t.is_alive() and not blocked, "the 101st send did not block"
            _tidemark(stack, "local", "up", "--replicas", "2x2")
            t.join(60)
            assert blocked and blocked[0].result(60)
            assert all(x.result(60) for x in handles)

        out = bench_stable(settings, rate=500, seconds=2, warm_up_s=2)
        assert out["failed"] == 0 and out["messages"] == 1000
        assert 0 < out["stable_p50_ms"] <= out["stable_p99_ms"]
        # the raw baseline beside each counted round, and each side's CPU per message
        assert out["rounds"] == 2 and len(out["raw_round_p99_ms"]) == 2
        assert 0 < out["raw_ack_p50_ms"] <= out["raw_ack_p99_ms"]
        assert set(out["cpu_us_per_msg"]) == {"raw", "tidemark"}
        assert all(side["client"] > 0 for side in out["cpu_us_per_msg"].values())

        fail_fast = PeerOptions(durability_timeout_ms=3000, flight_size=100, flight_mode="raise")
        with Peer("A2", settings.environment, settings, fail_fast) as a2:
            for node in owners:
                _tidemark(stack, "local", "kill", node)
            with pytest.raises(DurabilityTimeoutError, match=f"txlog partition {k}"):
                a2.send("B", Tick(0), "quorum")
            pending = [a2.send_nowait("B", Tick(i), "quorum") for i in range(100)]
            with pytest.raises(FlightSizeExceededError, match="100 sends unconfirmed, limit 100"):
                a2.send_nowait("B", Tick(100), "quorum")
            wait_for(lambda: all(p.done() for p in pending), 30, 0.1, "the pending sends timing out")
