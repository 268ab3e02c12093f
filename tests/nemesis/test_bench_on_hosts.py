"""``tidemark bench stable`` on the namespaced topology (three brokers and a replica pair on
hosts of their own, the bench on a host of its own), first as it is, then with 5 ms of
delay on every host's link: each run's figures beside the raw acks=all producer measured in
the same run on the same topology. The delay is the nemesis's (netem, or the user-space
delayer without it); the test checks that the delay was in effect (TCP connects from the
bench's host to each broker take at least two delayed trips) and that both runs confirmed
every message, not a latency target (a bench, not a timed test: docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tidemark.nemesis import Nemesis
from tidemark.stack.hosts import Host, Hosts
from tidemark.stack.launcher import LocalStack

pytestmark = [pytest.mark.nemesis, pytest.mark.timeout(900)]

#: One-way delay added to every packet a host sends (ms).
DELAY_MS = 5
#: The bench's rate (msgs/s) and counted seconds: every packet of the delayed run passes a
#: delayer, which costs CPU per packet on a kernel without netem
RATE, SECONDS = 2000, 5
_FIELDS = ("target_rate", "achieved_rate", "stable_p50_ms", "stable_p99_ms", "raw_ack_p50_ms",
           "raw_ack_p99_ms", "ratio_p99", "failed")

# the median time of 5 TCP connects to each address (argv), in ms
CONNECT = textwrap.dedent("""
    import socket, statistics, sys, time
    out = {}
    for addr in sys.argv[1:]:
        host, port = addr.rsplit(":", 1)
        took = []
        for _ in range(5):
            t = time.perf_counter()
            socket.create_connection((host, int(port)), 5).close()
            took.append((time.perf_counter() - t) * 1000)
        out[addr] = statistics.median(took)
    print(out)
""")


def _bench(stack: LocalStack, host: Host) -> dict[str, Any]:
    out = subprocess.run(host.argv([
        sys.executable, "-m", "tidemark", "bench", "stable", "--json",
        "--state-dir", str(stack.state_dir), "--rate", str(RATE), "--seconds", str(SECONDS),
        "--warm-up", "3", "--no-security-compare"]), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    assert r["failed"] == 0, r
    return {k: r[k] for k in _FIELDS}


def _connect_ms(stack: LocalStack, host: Host) -> dict[str, float]:
    brokers = stack.settings().bootstrap.split(",")
    out = subprocess.run(host.argv([sys.executable, "-c", CONNECT, *brokers]),
                         capture_output=True, text=True, timeout=120, check=True)
    return dict(eval(out.stdout))  # noqa: S307 - our own script's dict of floats


def test_bench_stable_on_hosts_with_5_ms_of_link_delay(
        hosts_cluster: tuple[LocalStack, Hosts]) -> None:
    stack, hosts = hosts_cluster
    bench = hosts.add("bench")
    plain = _bench(stack, bench)
    before = _connect_ms(stack, bench)
    nemesis = Nemesis(hosts, seed=5)
    try:
        for host in sorted(hosts.hosts):
            nemesis.delay(host, DELAY_MS)
        during = _connect_ms(stack, bench)
        delayed = _bench(stack, bench)
    finally:
        nemesis.heal()
    print(json.dumps({"topology": "hosts", "link_delay_ms": DELAY_MS,
                      "delayed_by": sorted({e["by"] for e in nemesis.events
                                            if e["kind"] == "delay"}),
                      "connect_ms": {"before": before, "during": during},
                      "no_delay": plain, "delayed": delayed}))
    # a connect is a SYN out of the bench's host and a SYN-ACK out of the broker's: both
    # delayed (the delayer's jitter is 0, its timer may fire a little early)
    assert all(ms >= 2 * DELAY_MS * 0.9 for ms in during.values()), during
