"""What a nemesis run records for the checker (:mod:`tidemark.nemesis`): the replica nodes'
states sampled over time by an observer on the bridge (interval maps, cuts and GC points,
from each node's own ``Status``: its interval map's floor, not a released prefix), the Sends and Acks of txlog, and the final interval maps,
digests, GC points and released Sends (``Fetch`` of what each node still stores) of
co-replicas."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Any

from tidemark.gossip.pki import Identity
from tidemark.gossip.service import ReplicaClient, unpack_records
from tidemark.gossip.tls import resolve_transport
from tidemark.log.consumer import read_to_end
from tidemark.log.settings import Settings
from tidemark.nemesis import Final, FinalPartition, PartitionSample, Sample, SendAck
from tidemark.peer_client.records import peer_codec


def _now_ms() -> int:
    return int(time.time() * 1000)


class Recorder:
    """Samples every node's own state each ``every_s`` in a thread (``samples``)."""

    def __init__(self, nodes: dict[str, str], every_s: float = 0.25) -> None:
        self.nodes, self.every_s = nodes, every_s
        self.client = ReplicaClient(transport=resolve_transport(
            Identity("operator", "nemesis-observer")))
        self.client.know(nodes)
        self.samples: list[Sample] = []
        self.unanswered = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Recorder":
        self._thread.start()
        return self

    def status(self, node: str, timeout: float = 1.0) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.client.call(self.nodes[node], "Status", b"", timeout)))
        except Exception:  # noqa: BLE001 - an unreachable node is "no sample", counted
            self.unanswered += 1
            return None

    def sample(self, node: str) -> Sample | None:
        t = _now_ms()
        doc = self.status(node)
        return None if doc is None else sample_of(node, doc, t)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for node in self.nodes:
                s = self.sample(node)
                if s is not None:
                    self.samples.append(s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def stored(self, node: str, partition: int, start: int, end: int) -> set[int]:
        """The offsets of ``[start, end)`` whose records ``node`` stores (``Fetch``)."""
        out: set[int] = set()
        for lo in range(start, end, 500):
            body = json.dumps({"partition": partition, "start": lo,
                               "end": min(end, lo + 500)}).encode()
            out.update(off for off, _ in unpack_records(
                self.client.call(self.nodes[node], "Fetch", body, 10)))
        return out

    def final(self, partitions: list[int], sends: dict[int, list[SendAck]]) -> Final:
        """Each node's interval map and digest per partition (over the range both hold),
        its GC point, and the recorded ``sends`` it no longer stores (released)."""
        out = Final()
        t = _now_ms()
        docs = {n: self.status(n) for n in self.nodes}
        samples = {n: None if d is None else sample_of(n, d, t) for n, d in docs.items()}
        gc = {n: (d or {}).get("gc_point", {}) for n, d in docs.items()}
        for k in partitions:
            ends = [max((r[1] for r in s.partitions[k].held), default=0)
                    for s in samples.values() if s is not None and k in s.partitions]
            end = min(ends) if ends else 0
            for node, s in samples.items():
                if s is None or k not in s.partitions:
                    continue
                body = json.dumps({"partition": k, "start": 0, "end": end}).encode()
                reply = json.loads(self.client.call(self.nodes[node], "Digest", body, 10))
                top = max((r[1] for r in s.partitions[k].held), default=0)
                have = self.stored(node, k, 0, top)
                released = tuple(sorted(a.offset for a in sends.get(k, [])
                                        if a.offset < top and a.offset not in have))
                point = gc[node].get(f"txlog/{k}")
                out.nodes.setdefault(node, {})[k] = FinalPartition(
                    s.partitions[k].held, f"{reply['digest']}:{reply['count']}", released,
                    None if point is None else int(point))
        return out

    def close(self) -> None:
        self.client.close()


def sends_and_acks(settings: Settings, recipient: str, partitions: list[int]
                   ) -> dict[int, list[SendAck]]:
    """Per txlog partition, the Sends to ``recipient`` and the offset of the record that
    acked each (None: never acked)."""
    codec = peer_codec()
    out: dict[int, list[SendAck]] = defaultdict(list)
    for k in partitions:
        sends: dict[str, int] = {}
        acked: dict[str, int] = {}
        for batch in read_to_end(settings, "txlog", [k]):
            for m in batch:
                try:
                    dec = codec.decode(m.value())
                except Exception:  # noqa: BLE001 - not a Tidemark record (load of a test)
                    continue
                r = dec.record
                if dec.name == "Send" and r["recipient"] == recipient:
                    sends[r["message_id"]] = m.offset()
                elif dec.name in ("Ack", "AckBatch") and r["peer"] == recipient:
                    for mid in r.get("message_ids") or [r.get("message_id")]:
                        acked.setdefault(mid, m.offset())
        out[k] = [SendAck(off, mid, acked.get(mid)) for mid, off in sends.items()]
    return dict(out)


def sample_of(node: str, doc: dict[str, Any], t: int) -> Sample:
    """The checker's sample of ``node`` from its own ``Status`` document taken at ``t``."""
    own = next((r for r in doc.get("nodes", []) if r.get("id") == node), None)
    parts: dict[int, PartitionSample] = {}
    for tp, p in (own or {}).get("partitions", {}).items():
        if not tp.startswith("txlog/"):
            continue
        base = [tuple(p["base"])] if p["base"][1] > p["base"][0] else []
        held = tuple(tuple(r) for r in base + [tuple(d) for d in p.get("detached", [])])
        # no released prefix is claimed: below its GC point a replica releases acked
        # Sends one by one and keeps unacked ones, and its interval map's floor is the
        # GC sweep's cursor (what the release verdict judges comes from final()); the
        # floor is where its holdings start, for the cut verdict
        parts[int(tp.split("/")[1])] = PartitionSample(
            held, doc.get("ust", {}).get(tp), None, int(p["base"][0]))
    return Sample(t, node, parts)
