"""The send path's CPU budget per message, by component: ``python -m
tidemark.bench.send_budget [--state-dir DIR] [--messages N] [--rounds R]``.

Each component runs ``N`` times in a loop of its own in this process, on a real peer of the
local stack (topics of their own, deleted at the end), and is timed by the thread's own CPU
clock (``time.thread_time``), so what other threads and processes do does not count; the
Kafka callbacks are served every 512 records inside the loops that produce, as the peer's
sender does. The loops are: a raw ``produce`` with a Python callback (what the raw producer
of ``bench send`` pays per message), the payload encoder, the Send encoder, the two in one
call as ``post`` encodes (``bound_send_encode``), the clock, the flight window (one slot
taken and given back), ``Peer.post`` and ``Peer.post_many`` (chunks of 1,000) whole.
``post`` minus the parts it calls is what the calls and checks between them cost. Prints JSON: the
median of ``R`` rounds per component in microseconds (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from tidemark.bench.peer import BenchPayload
from tidemark.log.settings import load_settings
from tidemark.log.topics import delete_topic_set, ensure_topics
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.peer import Peer

__all__ = ["send_budget", "main"]


def _cpu_us(n: int, loop: Callable[[], Any]) -> float:
    t0 = time.thread_time()
    loop()
    return (time.thread_time() - t0) / n * 1e6


def send_budget(state_dir: str | None = None, messages: int = 200_000, rounds: int = 3,
                payload_bytes: int = 150) -> dict[str, Any]:
    """Microseconds of this thread's CPU per message for each component (medians)."""
    settings = load_settings(state_dir=state_dir)
    bench = settings.with_overrides(topic_prefix=f"{settings.topic_prefix}budget"
                                                 f"{uuid.uuid4().hex[:6]}.")
    ensure_topics(bench)
    keys = [f"budget-peer-{i % 1000}" for i in range(messages)]
    msg = BenchPayload(os.urandom(payload_bytes))
    mt = message_type_of(msg)
    payload = mt.serializer.encode(msg)
    samples: dict[str, list[float]] = {}
    try:
        with Peer("budget-sender", "bench", bench,
                  PeerOptions(flight_size=messages, heartbeat_ms=60_000)) as peer:
            sender = peer._core.sender
            producer = sender.outbox.log._raw  # type: ignore[attr-defined]
            topic, value = bench.topic("txlog"), os.urandom(260)
            encode, encode_send, clock = mt.serializer.encode, sender._encode_send, \
                sender.clock_ms
            flight = sender.flight

            def callback(err: Any, m: Any) -> None:
                if err is not None:
                    raise RuntimeError(str(err))

            def raw() -> None:  # callbacks served every 512, as the peer's sender does
                produce, poll = producer.produce, producer.poll
                for i, k in enumerate(keys):
                    produce(topic, value, k, -1, callback)
                    if not i & 511:
                        poll(0)

            def window() -> None:
                for _ in keys:
                    flight.acquire(None)
                    flight.release()

            loops: dict[str, Callable[[], Any]] = {
                "raw_produce_with_callback": raw,
                "payload_encode": lambda: [encode(msg) for _ in keys],
                "send_encode": lambda: [encode_send("budget-1", k, mt.name, payload,
                                                    1_700_000_000_000) for k in keys],
                "clock": lambda: [clock() for _ in keys],
                "flight_window": window,
                "peer_post": lambda: [peer.post(k, msg) for k in keys],
            }
            if hasattr(sender, "_bind"):  # (absent before 2026-11-29: run on older code)
                bound = sender._bind(mt)[1]
                loops["bound_send_encode"] = lambda: [bound(msg, "budget-1", k,
                                                            1_700_000_000_000) for k in keys]
            if hasattr(peer, "post_many"):  # (absent before 2026-11-28: run on older code)
                loops["peer_post_many"] = lambda: [peer.post_many(keys[at], [msg] * 1000)
                                                   for at in range(0, messages, 1000)]
            for _ in range(rounds):
                for name, loop in loops.items():
                    samples.setdefault(name, []).append(_cpu_us(messages, loop))
                    producer.flush(120)
                    peer.flush(120)
    finally:
        delete_topic_set(bench)
    out = {name: round(statistics.median(v), 2) for name, v in samples.items()}
    # what post calls: the payload and the Send encoded in one call where it does that
    encoding = (("bound_send_encode",) if "bound_send_encode" in out
                else ("payload_encode", "send_encode"))
    parts = (*encoding, "clock", "flight_window", "raw_produce_with_callback")
    out["peer_post_calls_and_checks"] = round(out["peer_post"] - sum(out[p] for p in parts), 2)
    return {"messages": messages, "rounds": rounds, "us_per_msg": out,
            "rounds_us": {k: [round(x, 2) for x in v] for k, v in samples.items()}}


def main(argv: list[str] | None = None) -> int:
    """Run :func:`send_budget` and print its JSON."""
    ap = argparse.ArgumentParser(prog="python -m tidemark.bench.send_budget",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--state-dir", default=None, help="the local stack's state folder")
    ap.add_argument("--messages", type=int, default=200_000, help="calls per component")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed")
    args = ap.parse_args(argv)
    print(json.dumps(send_budget(args.state_dir, args.messages, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
