"""``tidemark bench send``: the peer's send at durability ``log`` beside a raw confluent-kafka
producer, in the same run, against the same cluster and topic.

Both sides write one record per message with the durable producer settings and a delivery
callback. The raw side produces pre-built bytes of the Send record's size to the same keys;
the peer side does what an application's send does: encode the message (Avro), build and
encode the Send, append it, and account for it until Kafka acknowledges it (flight window).
The headline figure is ``Peer.post`` (fire and forget, then ``flush``); ``tracked`` is
``Peer.send_nowait``, which also keeps a :class:`~tidemark.peer_client.Delivery` handle per message
alive until Kafka acknowledges it, and pays for it in garbage-collector time. The recipient
is not registered, so nothing is delivered directly (that path is measured by the
integration tests). Rounds alternate after an uncounted warm-up that lasts until both
sides' rates settle and, on the local stack, the brokers' JIT compilers are quiet
(:func:`~tidemark.bench.produce.warm_up`); medians are reported.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from array import array
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from tidemark.bench.produce import raw_produce_rate, warm_up, warm_up_report
from tidemark.bench.security import (
    compare_latency,
    compare_throughput,
    round_modes,
    skipped,
)
from tidemark.log.settings import Settings
from tidemark.log.topics import delete_topic_set, ensure_topics
from tidemark.peer_client.messages import message, message_type_of
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.records import peer_codec

__all__ = ["bench_send", "bench_stable", "BenchPayload"]


@message("tidemark.bench.Payload")
@dataclass
class BenchPayload:
    """The benchmark's message: an opaque blob."""

    data: bytes


def _peer_round(peer: Peer, keys: list[str], msg: BenchPayload, tracked: bool = False
                ) -> float:
    send = peer.send_nowait if tracked else peer.post
    start = time.perf_counter()
    for key in keys:
        send(key, msg, "log")
    if not peer.flush(120):
        raise RuntimeError("peer sends not confirmed within 120 s")
    return len(keys) / (time.perf_counter() - start)


def _peer_many_round(peer: Peer, runs: list[tuple[str, int]], msg: BenchPayload) -> float:
    """``Peer.post_many``: one call per run of messages to the same recipient."""
    start = time.perf_counter()
    for key, count in runs:
        peer.post_many(key, [msg] * count, "log")
    if not peer.flush(120):
        raise RuntimeError("peer sends not confirmed within 120 s")
    return sum(c for _, c in runs) / (time.perf_counter() - start)


def bench_send(settings: Settings, messages: int = 200_000, payload_bytes: int = 150,
               rounds: int = 3, recipients: int = 1000,
               progress: Callable[[str], None] = lambda m: None,
               jit: Callable[[], float] | None = None,
               compare_insecure: bool = True) -> dict[str, Any]:
    """Alternating rounds of raw producer and ``Peer.send``; rates (msg/s), medians, ratio.

    Runs on a topic set of its own (a unique prefix), deleted at the end. ``jit``: a probe
    of the brokers' JIT compilers for the warm-up (:func:`tidemark.bench.produce.warm_up`).
    ``compare_insecure``: each round also runs ``Peer.post`` on a second peer made with
    ``PeerOptions(insecure=True)``, before or after the secure one in turn; the
    ``security_*`` fields (:mod:`tidemark.bench.security`) compare the two.
    """
    bench = settings.with_overrides(
        topic_prefix=f"{settings.topic_prefix}bench{uuid.uuid4().hex[:6]}.")
    ensure_topics(bench)
    env = bench.environment if bench.environment != "default" else "bench"
    try:
        keys = [f"bench-peer-{i % recipients}" for i in range(messages)]
        # post_many's list: the same messages in runs to one recipient, and the raw
        # producer's keys in that order beside it (batches of one partition compress and
        # travel differently from keys taken in turn)
        runs = [(f"bench-peer-{r}", len(range(r, messages, recipients)))
                for r in range(min(recipients, messages))]
        run_keys = [key for key, count in runs for _ in range(count)]
        msg = BenchPayload(os.urandom(payload_bytes))
        options = PeerOptions(flight_size=max(messages, 1), heartbeat_ms=60_000)
        with ExitStack() as peers:
            peer = peers.enter_context(Peer("bench-sender", env, bench, options))
            plain = (peers.enter_context(Peer("bench-sender-plain", env, bench,
                                              replace(options, insecure=True)))
                     if compare_insecure else None)
            sample = peer_codec().encode("Send", {
                "message_id": f"{peer.incarnation}-{messages}", "sender": peer.peer_id,
                "recipient": keys[0], "environment": peer.environment,
                "message_type": "tidemark.bench.Payload",
                "payload": message_type_of(msg).serializer.encode(msg),
                "timestamp_ms": int(time.time() * 1000), "delivery_count": 0})
            raw_value, topic = os.urandom(len(sample)), bench.topic("txlog")
            sides: dict[str, Callable[[], float]] = {
                "raw": lambda: raw_produce_rate(bench, topic, keys, raw_value),
                "Peer.post": lambda: _peer_round(peer, keys, msg)}
            if plain is not None:
                sides["Peer.post insecure"] = lambda: _peer_round(plain, keys, msg)
            warm = warm_up(sides, progress, jit=jit)  # the brokers' JIT settles first
            raw_rates: list[float] = []
            peer_rates: list[float] = []
            tracked_rates: list[float] = []
            plain_rates: list[float] = []
            raw_run_rates: list[float] = []
            many_rates: list[float] = []
            for r in range(rounds):
                raw_rates.append(raw_produce_rate(bench, topic, keys, raw_value))
                progress(f"round {r + 1}/{rounds}: raw {raw_rates[-1]:,.0f} msg/s")
                for insecure in (round_modes(1) if r % 2 == 0 else round_modes(1)[::-1]):
                    who = plain if insecure else peer
                    if who is None:
                        continue
                    rates = plain_rates if insecure else peer_rates
                    rates.append(_peer_round(who, keys, msg))
                    progress(f"round {r + 1}/{rounds}: Peer.post"
                             f"{' insecure' if insecure else ''} {rates[-1]:,.0f} msg/s")
                tracked_rates.append(_peer_round(peer, keys, msg, tracked=True))
                progress(f"round {r + 1}/{rounds}: Peer.send_nowait"
                         f" {tracked_rates[-1]:,.0f} msg/s")
                raw_run_rates.append(raw_produce_rate(bench, topic, run_keys, raw_value))
                many_rates.append(_peer_many_round(peer, runs, msg))
                progress(f"round {r + 1}/{rounds}: raw in runs {raw_run_rates[-1]:,.0f},"
                         f" Peer.post_many {many_rates[-1]:,.0f} msg/s")
    finally:
        delete_topic_set(bench)
    raw, ours = statistics.median(raw_rates), statistics.median(peer_rates)
    tracked = statistics.median(tracked_rates)
    raw_runs, many = statistics.median(raw_run_rates), statistics.median(many_rates)
    return {"messages": messages, "payload_bytes": payload_bytes, "record_bytes": len(sample),
            "rounds": rounds, "durability": "log", "raw_msgs_per_s": round(raw),
            "peer_msgs_per_s": round(ours), "ratio": round(ours / raw, 3), "target_ratio": 0.9,
            "tracked_msgs_per_s": round(tracked), "tracked_ratio": round(tracked / raw, 3),
            "raw_runs_msgs_per_s": round(raw_runs), "post_many_msgs_per_s": round(many),
            "post_many_ratio": round(many / raw_runs, 3),
            "raw_runs_rounds": [round(x) for x in raw_run_rates],
            "post_many_rounds": [round(x) for x in many_rates],
            "raw_rounds": [round(x) for x in raw_rates],
            "peer_rounds": [round(x) for x in peer_rates],
            "tracked_rounds": [round(x) for x in tracked_rates],
            "warm_up_rounds": warm_up_report(warm),
            **(compare_throughput(peer_rates, plain_rates) if plain_rates
               else skipped("--no-security-compare"))}


def _timer(out: list[float], sent_at: float) -> Callable[..., None]:
    def done(*_: Any) -> None:
        out.append(time.perf_counter() - sent_at)
    return done


def _pace(due: float, poll: Callable[[float], Any] | None = None) -> None:
    """Hold the sender back until at most 1 ms before ``due`` (a rate, not a sync point).
    Sleeping only when a whole millisecond ahead sends in bursts of up to 1 ms: a sleep per
    message hands the GIL to the peer's other threads 10,000 times a second, and getting it
    back can take their whole switch interval (5 ms), which held the sender to 2,000/s."""
    ahead = due - time.perf_counter()
    if ahead > 0.001:
        if poll is not None:
            poll(0)
        time.sleep(ahead)


def _pct(values: list[float], p: float) -> float:
    """Percentile ``p`` of ``values`` (seconds) in milliseconds, rounded."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 1)


def raw_ack_latency(settings: Settings, rate: int, seconds: float, size: int,
                    recipients: int = 100, latencies: list[float] | None = None,
                    producer: Any = None) -> dict[str, float]:
    """The baseline of :func:`bench_stable`: a plain confluent-kafka producer with the durable
    settings (acks=all) paced at the same rate; p50/p99 from ``produce`` to its delivery
    report, i.e. what Kafka alone takes to make a record durable on the same cluster.
    Each latency is also appended to ``latencies``; ``producer``: one to reuse (warm)."""
    from confluent_kafka import Producer

    from tidemark.bench.produce import bench_topic
    if producer is None:
        producer = Producer(settings.producer_config())
    topic, value = bench_topic(settings), os.urandom(size)  # shaped like txlog, not read
    got: list[float] = []
    total = max(1, int(rate * seconds))
    start = time.perf_counter()
    for i in range(total):
        _pace(start + i / rate, producer.poll)
        producer.produce(topic, value, f"bench-raw-{i % recipients}",
                         on_delivery=_timer(got, time.perf_counter()))
        producer.poll(0)
    producer.flush(60)
    if latencies is not None:
        latencies.extend(got)
    return {"p50_ms": _pct(got, 0.50), "p99_ms": _pct(got, 0.99)}


class _CpuRounds:
    """The CPU split of counted rounds: core-seconds per part summed over the rounds of a
    side, then microseconds per message (``None`` parts: not a process of the local stack)."""

    def __init__(self, groups: dict[str, dict[str, int]]) -> None:
        self.groups = groups
        self.core_s: dict[str, dict[str, float | None]] = {}
        self.messages: dict[str, int] = {}

    def measure(self, side: str, messages: int, run: Callable[[], Any]) -> Any:
        """Run one counted round of ``side`` under a CPU account."""
        from tidemark.stack.cpu_account import CpuAccount
        account = CpuAccount(self.groups)
        account.start()
        try:
            return run()
        finally:
            account.stop()
            parts = {"client": account.used("client"), "replicas": account.used("replicas"),
                     "brokers": account.used("brokers")}
            report = account.report(parts, messages)["core_s"]
            mine = self.core_s.setdefault(side, {})
            for k, v in report.items():
                mine[k] = None if v is None or (k in mine and mine[k] is None) else \
                    (mine.get(k) or 0.0) + v
            self.messages[side] = self.messages.get(side, 0) + messages

    def us_per_msg(self) -> dict[str, dict[str, float | None]]:
        return {side: {k: None if v is None else round(v / self.messages[side] * 1e6, 1)
                       for k, v in parts.items()}
                for side, parts in self.core_s.items()}


class _Tally:
    """What the stable bench keeps per message, without an object per message: send times
    and latencies in flat arrays (not tracked by the garbage collector, so the harness's own
    bookkeeping does not make the interpreter's full collections, which stop every thread,
    longer as a round goes on), and counts."""

    def __init__(self, total: int) -> None:
        self.sent_at = array("d", bytes(8 * total))
        self.latency = array("d", bytes(8 * total))
        self.finished = self.failed = 0
        self.all_done = threading.Event()
        self.total = total
        self._lock = threading.Lock()  # callbacks come from several threads

    def done(self, i: int, handle: Any) -> None:
        self.latency[i] = time.perf_counter() - self.sent_at[i]
        with self._lock:
            self.failed += handle.exception() is not None
            self.finished += 1
            if self.finished == self.total:
                self.all_done.set()


def _stable_round(peer: Peer, msg: BenchPayload, rate: int, total: int,
                  latencies: list[float]) -> tuple[float, float, int]:
    """``total`` paced ``send_nowait`` at durability ``all``; appends each latency to
    ``latencies``; returns (seconds sending, seconds until the last was stable, failures)."""
    tally, start = _Tally(total), time.perf_counter()
    send, sent_at, done = peer.send_nowait, tally.sent_at, tally.done
    for i in range(total):
        _pace(start + i / rate)
        sent_at[i] = time.perf_counter()
        send(f"bench-peer-{i % 100}", msg, "all").add_done_callback(partial(done, i))
    sent_s = time.perf_counter() - start
    if not tally.all_done.wait(120):
        raise RuntimeError(f"{total - tally.finished} of {total} sends not stable within 120 s")
    latencies.extend(tally.latency)
    return sent_s, time.perf_counter() - start - sent_s, tally.failed


def bench_stable(settings: Settings, rate: int = 10_000, seconds: float = 5.0,
                 payload_bytes: int = 150, warm_up_s: float = 10.0,
                 progress: Callable[[str], None] = lambda m: None,
                 switch: Callable[[bool], float] | None = None, pairs: int = 2,
                 skip_reason: str = "--no-security-compare",
                 pids: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """Send→stable latency: ``send_nowait`` at durability ``all`` at ``rate`` msgs/s for
    ``seconds``; p50/p99 of the time from the call to the stable cut covering the Send,
    beside the raw baseline (:func:`raw_ack_latency`, same rate, same cluster).

    The baseline is measured beside each counted round, not once: a raw round of the same
    length runs right before every counted round of the peer, after an uncounted warm-up
    of its own, and its latencies are pooled like the peer's. Measured once at the start,
    it caught the brokers still compiling (on 2026-11-28: raw p99 1.8 and 2.8 s on two fresh
    stacks, against 46-150 ms on the same stacks minutes later), which made the ratio
    meaningless. A first round of ``warm_up_s`` at the same rate is not counted either: it
    opens the peer's streams to the replicas and reads the cluster config, which the first
    sends of a new peer would otherwise pay (0.4-0.6 s), and it takes the first seconds of
    load on replica nodes that have just started.
    ``switch`` (the nodes to plaintext with True, back to TLS with False; returns the
    seconds the restart took): the rounds alternate secure and insecure ``pairs`` times
    (:func:`tidemark.bench.security.round_modes`), each on a peer of its side after its
    own warm-up, and the ``security_*`` fields compare the two p99s; the headline figures
    pool the secure rounds. Without it, ``pairs`` secure rounds on one peer and
    ``skip_reason``.
    ``pids`` (``{"replicas": {name: pid}, "brokers": {...}}``, the local stack's): the
    ``cpu_us_per_msg`` field gives each side's CPU per message in µs, split between this
    process (the client: the peer or the raw producer), the replica nodes, the brokers and
    the machine.
    Needs the replica nodes (``tidemark local up --replicas 2x2``) on ``settings``' topics."""
    from confluent_kafka import Producer
    msg = BenchPayload(os.urandom(payload_bytes))
    total = max(1, int(rate * seconds))
    raw_producer = Producer(settings.producer_config())
    raw_latencies: list[float] = []
    if warm_up_s > 0:
        progress(f"raw baseline: plain producer, acks=all, warm-up {rate}/s for {warm_up_s:g} s"
                 " (not counted)")
        raw_ack_latency(settings, rate, warm_up_s, payload_bytes + 60, producer=raw_producer)
    cpu = _CpuRounds({"client": {"client": os.getpid()}, **(pids or {})})
    options = PeerOptions(flight_size=max(total, int(rate * warm_up_s), 1), heartbeat_ms=60_000)
    latencies: dict[bool, list[float]] = {False: [], True: []}
    round_p99: dict[bool, list[float]] = {False: [], True: []}
    raw_p99: list[float] = []
    sent_s, drain_s, failed = 0.0, 0.0, 0
    restarts: list[float] = []
    sides = [[m] for m in round_modes(pairs)] if switch is not None else [[False] * pairs]
    for modes in sides:
        insecure = modes[0]
        side = "insecure" if insecure else "secure"
        if switch is not None:
            took = switch(insecure)
            if took:
                restarts.append(round(took, 2))
                progress(f"replica nodes restarted {side} in {took:.1f} s")
        # the replica cluster's own environment: its nodes refuse another one's waits
        with Peer("bench-stable" + ("-plain" if insecure else ""), settings.environment,
                  settings, replace(options, insecure=insecure)) as peer:
            if warm_up_s > 0:
                progress(f"{side}: warm-up {rate}/s for {warm_up_s:g} s at durability all"
                         " (not counted)")
                _stable_round(peer, msg, rate, max(1, int(rate * warm_up_s)), [])
            for _ in modes:
                raw = cpu.measure("raw", total, partial(
                    raw_ack_latency, settings, rate, seconds, payload_bytes + 60,
                    latencies=raw_latencies, producer=raw_producer))
                raw_p99.append(raw["p99_ms"])
                progress(f"raw baseline: sent {total} with acks=all; p99 {raw['p99_ms']} ms")
                got: list[float] = []
                s_s, d_s, f = cpu.measure("tidemark" if not insecure else "insecure", total,
                                          partial(_stable_round, peer, msg, rate, total, got))
                latencies[insecure].extend(got)
                round_p99[insecure].append(_pct(got, 0.99))
                progress(f"{side}: sent {total} at durability all; p99"
                         f" {round_p99[insecure][-1]} ms; all stable {d_s:.2f} s after the last")
                if not insecure:
                    sent_s, drain_s, failed = sent_s + s_s, max(drain_s, d_s), failed + f
    raw_producer.flush(10)
    secure = latencies[False]
    p99, raw_all_p99 = _pct(secure, 0.99), _pct(raw_latencies, 0.99)
    # achieved_rate: how fast the sends went out (the pacing loop); drain_s: how long after
    # the last send every one of them was stable
    result = {"messages": total, "rounds": len(round_p99[False]), "warm_up_s": warm_up_s,
              "target_rate": rate, "achieved_rate": round(len(secure) / sent_s),
              "drain_s": round(drain_s, 2),
              "stable_p50_ms": _pct(secure, 0.50), "stable_p99_ms": p99, "failed": failed,
              "round_p99_ms": round_p99[False],
              "target_p99_ms": 100, "target_ratio_p99": 4,
              "raw_ack_p50_ms": _pct(raw_latencies, 0.50), "raw_ack_p99_ms": raw_all_p99,
              "raw_round_p99_ms": raw_p99,
              "ratio_p99": round(p99 / raw_all_p99, 2) if raw_all_p99 else None,
              "cpu_us_per_msg": cpu.us_per_msg()}
    if switch is None:
        return {**result, **skipped(skip_reason)}
    compared = compare_latency(p99, _pct(latencies[True], 0.99), round_p99[False],
                               round_p99[True])
    compared["security"].update({"insecure_p50_ms": _pct(latencies[True], 0.50),
                                 "restarts_s": restarts})
    return {**result, **compared}
