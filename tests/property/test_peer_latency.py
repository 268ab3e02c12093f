"""The peer's sampled latency histograms (peer_client.latency) against a plain model: each
bucket counts the observations at or below its bound; one message in SAMPLE_EVERY is timed,
whatever the sizes of the jobs that carry them; on the test double every sampled send and
handler shows in the exported histograms."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from tidemark.peer_client import message
from tidemark.peer_client.latency import BUCKETS, SAMPLE_EVERY, Latencies, Latency
from tidemark.peer_client.metrics import PeerCollector
from tidemark.peer_client.testing import TestBus


@given(st.lists(st.floats(0, 100, allow_nan=False), max_size=200))
def test_buckets_are_cumulative_counts_at_or_below_each_bound(xs: list[float]) -> None:
    h = Latency()
    for x in xs:
        h.observe(x)
    snap = h.snapshot()
    want = [sum(1 for x in xs if x <= b) for b in BUCKETS] + [len(xs)]
    assert [n for _, n in snap["buckets"]] == want
    assert snap["buckets"][-1][0] == "+Inf" and snap["count"] == len(xs)
    assert abs(snap["sum"] - sum(xs)) <= 1e-6 * max(1.0, sum(xs))


@given(st.lists(st.integers(1, 40), max_size=100))
def test_a_job_is_timed_when_it_holds_a_sampled_message(sizes: list[int]) -> None:
    """Messages are numbered 1, 2, ... as jobs carry them; the SAMPLE_EVERY-th, 2 x ... are
    the sampled ones; a job holding one of them is timed."""
    lat = Latencies()
    got = [lat.sample_handler(n) for n in sizes]
    first = 1
    want = []
    for n in sizes:
        want.append(any(k % SAMPLE_EVERY == 0 for k in range(first, first + n)))
        first += n
    assert got == want


@message("tests.latency.Tick")
@dataclass
class Tick:
    n: int


def test_sampled_sends_and_handlers_show_in_the_exported_histograms() -> None:
    bus = TestBus()
    b = bus.peer("B")
    b.handler(Tick)(lambda msg: None)
    a = bus.peer("A")
    for i in range(4 * SAMPLE_EVERY):
        a.send("B", Tick(i))
    sent = a.status()["latency"]
    assert sent["send_log"]["count"] == 4 and sent["send_all"]["count"] == 0
    assert b.status()["latency"]["handler"]["count"] == 4
    families = {m.name: m for m in PeerCollector(b.status).collect()}
    handler = families["tidemark_peer_handler_seconds"]
    count = [s.value for s in handler.samples if s.name.endswith("_count")]
    assert count == [4.0]
    send = families["tidemark_peer_send_seconds"]
    assert {s.labels["durability"] for s in send.samples} == {"log", "quorum", "all"}
