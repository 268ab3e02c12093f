"""The peer's side of a replay, CPU per message: ``python -m tidemark.bench.replay_budget
[--messages N] [--rounds R] [--senders S] [--chunk C] [--handler batch|single]``.

No stack: a real :class:`~tidemark.peer_client.core.PeerCore` (its thread executor, inbox,
dedup window and acker; a log port that drops what is appended) is handed ``N`` replay rows
framed as the ``Replay`` stream's ``E`` messages, ``C`` rows each (the stream's ack interval),
to a no-op handler. Two paths take the same messages in turns, ``R`` rounds each:

- ``general``, the baseline: every row becomes an Envelope, decided one by one
  (``entry_rows`` + ``EntryReader.envelopes`` + ``PeerCore.deliver_replayed_batch``);
- ``lean``: a message is read straight into columns and decided in bulk
  (``EntryReader.read_message`` + ``PeerCore.deliver_replayed_columns``).

Each round is timed by the process's CPU clock (``time.process_time``: the executor's
workers count, other processes do not) from the first row to the last ack queued. Prints
JSON: each path's per-round and median microseconds per message, and lean / general.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from typing import Any

from tidemark.bench.peer import BenchPayload
from tidemark.gossip.replay import ENTRIES_START, encode_entries, entry_rows
from tidemark.log.wire import encode_row
from tidemark.peer_client.columns import Columns
from tidemark.peer_client.context import Phase
from tidemark.peer_client.core import PeerCore
from tidemark.peer_client.executor import ThreadExecutor
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.replay.entries import EntryReader

__all__ = ["replay_budget", "main"]

PATHS = ("general", "lean")


class _DropLog:
    """A log port that keeps nothing (the acks' records are built, not sent)."""

    def __init__(self) -> None:
        self.appended = 0

    def append(self, key: str, value: bytes, on_delivery: Any = None) -> None:
        self.appended += 1

    def append_many(self, key: str, values: list[bytes], on_delivery: Any = None) -> None:
        self.appended += len(values)

    def flush(self, timeout: float) -> None: ...
    def serve(self) -> None: ...
    def deliver(self, endpoint: str, batch: bytes, done: Any) -> None: ...
    def publish(self, peer_id: str, descriptor: Any, on_delivery: Any = None) -> None: ...


def _rows(messages: int, senders: int, chunk: int, payload: bytes
          ) -> list[list[tuple[int, bytes]]]:
    out: list[list[tuple[int, bytes]]] = []
    for start in range(0, messages, chunk):
        out.append([(i, encode_row({
            "message_id": f"{os.urandom(8).hex()}-{i}", "sender": f"bench-sender-{i % senders}",
            "message_type": "tidemark.bench.Payload", "payload": payload,
            "timestamp_ms": 1_700_000_000_000 + i, "txlog_offset": i, "txlog_partition": 3,
            "delivery_count": 0}) or b"") for i in range(start, min(messages, start + chunk))])
    return out


def _round(path: str, frames: list[bytes], messages: int,
           handler: str) -> float:
    port = _DropLog()
    core = PeerCore("budget", "bench", PeerOptions(), log_port=port, direct=port,
                    directory_port=port, stability=None,
                    executor=ThreadExecutor(PeerOptions().workers, name="budget"),
                    max_message_bytes=1 << 20)
    handled = [0]
    if handler == "batch":
        core.batch_handler(BenchPayload)(lambda msgs: handled.__setitem__(0, handled[0]
                                                                          + len(msgs)))
    else:
        core.handler(BenchPayload)(lambda msg: None)
    core.set_phase(Phase.REPLAY)
    reader = EntryReader("bench", 3)
    gc.collect()
    t0 = time.process_time()
    if path == "lean":
        for msg in frames:
            cols, _, _ = reader.read_message(msg, ENTRIES_START)
            assert isinstance(cols, Columns)
            core.deliver_replayed_columns(cols)
    else:
        for msg in frames:
            core.deliver_replayed_batch(reader.envelopes(entry_rows(msg)))
    if not core.executor.drain(600):
        raise RuntimeError("the handlers did not finish within 600 s")
    core.flush_acks()
    spent = time.process_time() - t0
    core.executor.close()
    if handler == "batch" and handled[0] != messages:
        raise RuntimeError(f"{handled[0]} of {messages} messages handled")
    if core.stats["acks"] != messages:
        raise RuntimeError(f"{core.stats['acks']} of {messages} messages acked")
    return spent / messages * 1e6


def replay_budget(messages: int = 200_000, rounds: int = 3, senders: int = 1,
                  chunk: int = 2500, handler: str = "batch") -> dict[str, Any]:
    """Microseconds of the process's CPU per replayed message, per path (see the module)."""
    payload = message_type_of(BenchPayload).serializer.encode(BenchPayload(os.urandom(150)))
    frames = [encode_entries(1, 0, 0, rows) for rows in _rows(messages, senders, chunk, payload)]
    samples: dict[str, list[float]] = {p: [] for p in PATHS}
    for r in range(rounds):
        for path in (PATHS if r % 2 == 0 else PATHS[::-1]):
            samples[path].append(round(_round(path, frames, messages, handler), 3))
    medians = {p: statistics.median(v) for p, v in samples.items()}
    return {"messages": messages, "rounds": rounds, "senders": senders, "chunk": chunk,
            "handler": handler, "us_per_message": samples,
            "median_us": {p: round(m, 3) for p, m in medians.items()},
            "lean_over_general": round(medians["lean"] / medians["general"], 3),
            "load_average": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tidemark.bench.replay_budget",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--messages", type=int, default=200_000, help="replayed messages per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per path")
    ap.add_argument("--senders", type=int, default=1, help="senders the messages come from")
    ap.add_argument("--chunk", type=int, default=2500, help="messages per chunk handed over")
    ap.add_argument("--handler", choices=("batch", "single"), default="batch",
                    help="a batch handler (a list per call) or a plain one")
    args = ap.parse_args(argv)
    if args.messages <= 0 or args.rounds <= 0 or args.senders <= 0 or args.chunk <= 0:
        print("replay_budget: --messages, --rounds, --senders and --chunk must be positive",
              file=sys.stderr)
        return 2
    print(json.dumps(replay_budget(args.messages, args.rounds, args.senders, args.chunk,
                                   args.handler)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
