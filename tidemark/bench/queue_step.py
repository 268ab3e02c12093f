"""``tidemark bench queues --step``: the queues job's own step (``process_rows``, the pandas
work of each micro-batch, without Spark or Kafka), per message, on two workloads side by side
in one process:

- **single acks**: Sends and one single-id Ack record per acked message, no admission (what
  txlog held and the job did before acks were signed);
- **signed batches**: Sends and signed AckBatch records of 100 ids, each checked by the job's
  admission (environment and signature against a CA made for the run), as peers write them.

Both carry the same messages (half of them acked), so the cost per message compares the job's
work; the records per message differ (1.5 against about 1.005), which is what moves
``bench queues``'s ratio to a raw consumer, whose cost follows the records.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from tidemark.gossip.pki import Identity, init_ca, issue
from tidemark.gossip.record_signing import RecordSigner, SignatureVerifier
from tidemark.gossip.txlog_admission import TxlogAdmission
from tidemark.log.queue_state import Ttl
from tidemark.log.wire import default_codec
from tidemark.spark_streaming.state_layout import MemoryMaps
from tidemark.spark_streaming.transform import REFUSED, process_rows

__all__ = ["bench_queue_step", "print_step_report"]

ENV = "bench"
ACK_IDS = 100
Rows = list[tuple[bytes, bytes]]


def _workload(messages: int, names: list[str], seal: dict[str, Any] | None) -> Rows:
    """``messages`` Sends to the peers ``names``, half acked: single Acks (``seal`` None) or
    AckBatches of :data:`ACK_IDS` sealed by the recipient's own ``seal[peer]``."""
    codec, rng, now = default_codec(), random.Random(7), int(time.time() * 1000)
    peers = len(names)
    rows: Rows = []
    pending: dict[str, list[str]] = {}

    def batch(peer: str) -> None:
        assert seal is not None
        rows.append((peer.encode(), seal[peer](codec.encode("AckBatch", {
            "peer": peer, "environment": ENV, "message_ids": pending.pop(peer),
            "timestamp_ms": now, "signer": b"", "signature": b""}))))
    for i in range(messages):
        peer = names[rng.randrange(peers)]
        rows.append((peer.encode(), codec.encode("Send", {
            "message_id": f"m{i}", "sender": "s", "recipient": peer, "environment": ENV,
            "message_type": "bench.Event", "payload": b"x" * 150, "timestamp_ms": now,
            "delivery_count": 0})))
        if rng.random() < 0.5:
            if seal is None:
                rows.append((peer.encode(), codec.encode("Ack", {
                    "message_id": f"m{i}", "peer": peer, "environment": ENV,
                    "timestamp_ms": now})))
            else:
                pending.setdefault(peer, []).append(f"m{i}")
                if len(pending[peer]) >= ACK_IDS:
                    batch(peer)
    for peer in list(pending):
        batch(peer)
    return rows


def _apply(rows: Rows, admission: TxlogAdmission | None, chunk: int) -> float:
    """Seconds to apply ``rows`` to fresh state in micro-batches of ``chunk`` records. Raises
    when the admission refused any (the bench would measure refusals, not acks)."""
    maps, ttl = MemoryMaps(), Ttl(10**12, 10**12)
    t0 = time.perf_counter()
    refused = 0
    for lo in range(0, len(rows), chunk):
        frame = pd.DataFrame([(k, v, 0, lo + j) for j, (k, v) in enumerate(rows[lo:lo + chunk])],
                             columns=["key", "value", "partition", "offset"])
        out = process_rows(frame, maps, ttl, admission=admission)
        refused += int(out.kind.isin(list(REFUSED.values())).sum())
    took = time.perf_counter() - t0
    if refused:
        raise RuntimeError(f"the admission refused {refused} records of the workload")
    return took


def bench_queue_step(messages: int = 60_000, peers: int = 100, rounds: int = 3,
                     chunk: int = 6000) -> dict[str, Any]:
    """Both workloads, alternated ``rounds`` times; the best round of each, per message."""
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-step-") as tmp:
        ca = Path(tmp) / "ca"
        init_ca(ca, name="tidemark bench")
        names = [f"peer-{i}" for i in range(peers)]
        seal = {n: RecordSigner.from_files(issue(ca, Identity("peer", n, ENV),
                                                 Path(tmp) / "issued", stem=n)).seal
                for n in names}
        verifier = SignatureVerifier.from_files(ca / "trust.pem", ca / "crl.pem")
        single = _workload(messages, names, None)
        signed = _workload(messages, names, seal)
        admission = TxlogAdmission(ENV, verifier)
        times: dict[str, list[float]] = {"single_acks": [], "signed_batches": []}
        for _ in range(rounds):
            times["single_acks"].append(_apply(single, None, chunk))
            times["signed_batches"].append(_apply(signed, admission, chunk))
    out: dict[str, Any] = {"messages": messages, "acked": "half", "rounds": rounds}
    for name, rows in (("single_acks", single), ("signed_batches", signed)):
        best = min(times[name])
        out[name] = {"records": len(rows), "records_per_message": round(len(rows) / messages, 3),
                     "best_s": round(best, 3),
                     "us_per_message": round(best / messages * 1e6, 2)}
    out["ratio"] = round(out["single_acks"]["us_per_message"]
                         / out["signed_batches"]["us_per_message"], 3)
    return out


def print_step_report(r: dict[str, Any]) -> None:
    """The text report of :func:`bench_queue_step`."""
    for name in ("single_acks", "signed_batches"):
        w = r[name]
        print(f"{name.replace('_', ' ')}: {w['us_per_message']} us/message"
              f" ({w['records']} records, {w['records_per_message']} a message;"
              f" best of {r['rounds']}: {w['best_s']} s)")
    print(f"ratio (single acks / signed batches, per message): {r['ratio']}")
