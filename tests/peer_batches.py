"""Shared by the batch delivery and batch handler tests: a PeerCore on in-memory ports,
replayed envelopes drawn by hypothesis, and the model of what a handler should see."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tidemark.log.wire import default_codec
from tidemark.peer_client import MessageContext, message
from tidemark.peer_client.columns import Columns
from tidemark.peer_client.context import Phase
from tidemark.peer_client.core import PeerCore
from tidemark.peer_client.executor import ThreadExecutor
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.records import Envelope

__all__ = ["BatchItem", "ENCODE", "Log", "core_of", "messages", "lean_messages", "envelopes",
           "model", "columns_of", "deliver_columns"]

CODEC = default_codec()


@message("unit.BatchItem")
@dataclass
class BatchItem:
    n: int
    fail: bool = False


ENCODE = message_type_of(BatchItem).serializer.encode


class Log:
    """An in-memory txlog port (and the other ports, unused)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[tuple[str, dict[str, Any]]] = []

    def append(self, key: str, value: bytes, on_delivery: Any = None) -> None:
        d = CODEC.decode(value)
        with self.lock:
            self.records.append((d.name, d.record))

    def flush(self, timeout: float) -> None: ...
    def serve(self) -> None: ...
    def deliver(self, endpoint: str, batch: bytes, done: Any) -> None: ...
    def publish(self, peer_id: str, desc: Any, on_delivery: Any = None) -> None: ...

    def ids(self, name: str) -> list[str]:
        """Message ids of the ``name`` records (``Ack``: of the AckBatch records)."""
        with self.lock:
            if name == "Ack":
                return sorted(m for n, r in self.records if n == "AckBatch"
                              for m in r["message_ids"])
            return sorted(r["message_id"] for n, r in self.records if n == name)


def core_of(limit: int, workers: int = 4,
          slow: Any = None) -> tuple[PeerCore, Log, dict[str, list[int]]]:
    port = Log()
    opts = PeerOptions(workers=workers, inbox_limit=limit)
    core = PeerCore("B", "test", opts, log_port=port, direct=port, directory_port=port,
                    stability=None, executor=ThreadExecutor(workers, name="B"),
                    max_message_bytes=1 << 20)
    handled: dict[str, list[int]] = defaultdict(list)

    def handle(msg: BatchItem, ctx: MessageContext) -> None:
        handled[ctx.sender].append(msg.n)  # one job of a sender at a time: no race
        if msg.fail:
            raise ValueError(f"item {msg.n} fails")
    core.handler(BatchItem)(slow or handle)
    core.set_phase(Phase.REPLAY)
    return core, port, handled


# (sender, id number, kind): kind ok, fail (handler raises), unknown (type), malformed
kinds = st.sampled_from(["ok", "ok", "ok", "fail", "unknown", "malformed"])
messages = st.lists(st.tuples(st.sampled_from("ABC"), st.integers(0, 30), kinds), max_size=60)
#: only what the lean path takes (no unknown type, no malformed payload)
lean_messages = st.lists(st.tuples(st.sampled_from("ABC"), st.integers(0, 30),
                                   st.sampled_from(["ok", "ok", "ok", "fail"])), max_size=60)


def envelopes(spec: list[tuple[str, int, str]]) -> list[Envelope]:
    out = []
    for i, (sender, n, kind) in enumerate(spec):
        mid = f"m{n}" if kind == "ok" else f"{kind}{i}"  # failures never repeat: no timing
        mtype, payload = "unit.BatchItem", ENCODE(BatchItem(n if kind == "ok" else -i,
                                                            kind == "fail"))
        if kind == "unknown":
            mtype = "unit.Nope"
        elif kind == "malformed":
            payload = b"\xc3\x01garbage"
        out.append(Envelope(mid, sender, mtype, payload, 1, True, "test", 0, False, 0, i))
    return out


def model(spec: list[tuple[str, int, str]]) -> dict[str, list[int]]:
    seen: set[str] = set()
    out: dict[str, list[int]] = defaultdict(list)
    for i, (sender, n, kind) in enumerate(spec):
        if kind == "ok" and f"m{n}" not in seen:
            seen.add(f"m{n}")
            out[sender].append(n)
        elif kind == "fail":
            out[sender].append(-i)
    return dict(out)


def columns_of(envs: list[Envelope]) -> Columns:
    """Replayed envelopes of one partition as the lean path's columns."""
    return Columns(envs[0].txlog_partition if envs else 0, "test",
                   [e.txlog_offset for e in envs], [e.message_id for e in envs],
                   [e.sender for e in envs], [e.message_type for e in envs],
                   [e.payload for e in envs], [e.timestamp_ms for e in envs],
                   [e.delivery_count for e in envs])


def deliver_columns(core: PeerCore, envs: list[Envelope], chunk: int) -> int:
    """Deliver ``envs`` in chunks as the replayer does (the lean path, else the general
    one); how many chunks the lean path took."""
    lean = 0
    for i in range(0, len(envs), chunk):
        cols = columns_of(envs[i:i + chunk])
        if core.inbox.accept_columns(cols) is not None:
            lean += 1
        else:
            core.deliver_replayed_batch(cols.envelopes())
    return lean
