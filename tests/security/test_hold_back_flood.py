"""A flood of direct deliveries to a peer that is replaying cannot exhaust its memory: the
held-back list is bounded by bytes, what does not fit is refused by a receipt, and that
message arrives later through the log. On real Kafka, the real replica nodes (2x2) and Spark
queues job, and a real recipient process: B starts with its replay held at the start (a
replayer that waits for "go" on stdin, then replays for real) while A posts 100 MiB of
100 KiB messages to it; B's held bytes stay within 8 MiB and its memory high-water mark
grows by far less than the flood, its second half (50 MiB) adding at most what one held list
and one direct call hold; after "go", B handles every confirmed message exactly once.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import Blob, HandlerLog, PeerScript, wait_for
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.peer import Peer
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess

pytestmark = [pytest.mark.fault, pytest.mark.spark, pytest.mark.load, pytest.mark.timeout(900)]

FLOOD_MIB, BLOB_KIB, HOLD_MIB = 100, 100, 8
#: one direct call's batch at most (PeerOptions.direct_batch_bytes, 4 MiB)
DIRECT_MIB = PeerOptions().direct_batch_bytes >> 20

# The recipient. argv: state dir, peer id, record file. stdin: "status", "stop", "go"
# (start the held replay), "memory" (one JSON line: VmHWM and VmRSS in KiB).
SCRIPT = textwrap.dedent(f"""
    import json, sys, threading
    from tidemark.log.settings import load_settings
    from tidemark.peer_client import MessageContext, Peer, PeerOptions
    from tidemark.peer_client.replay import ReplicaReplayer
    from tests.support import Blob, HandlerRecord, serve_peer

    state, peer_id, path = sys.argv[1:4]
    settings = load_settings(state_dir=state)
    record, go = HandlerRecord(path, fsync=False), threading.Event()

    class HeldReplay(ReplicaReplayer):
        def run(self, core):
            go.wait()
            return super().run(core)

    def memory():
        fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
        print(json.dumps({{k: int(fields[k].split()[0]) for k in ("VmHWM", "VmRSS")}}),
              flush=True)

    peer = Peer(peer_id, None, settings,
                PeerOptions(hold_bytes={HOLD_MIB} << 20, hold_limit=100_000),
                replayer=HeldReplay(settings))

    def on_blob(msg: Blob, ctx: MessageContext) -> None:
        record.write("done", peer.incarnation, ctx.message_id, msg.n)

    peer.handler(Blob)(on_blob)
    serve_peer(peer, {{"go": go.set, "memory": memory}})
""")


def test_a_flood_while_replaying_is_bounded_and_nothing_is_lost(
        replicas_job: tuple[LocalStack, JobProcess], tmp_path: Path,
        peer_scripts: Callable[..., PeerScript]) -> None:
    s, job = replicas_job
    settings, record = s.settings(), HandlerLog(tmp_path / "handled.log")
    b = peer_scripts(s, "Bh", SCRIPT, str(record.path))
    a = Peer("Ah", None, settings).start()
    try:
        wait_for(lambda: any(e.peer_id == "Bh" and e.endpoint for e in a.directory()), 120,
                 0.2, "B registered (its replay held)")
        b.command("memory")
        before = json.loads(b.line())
        data = b"x" * (BLOB_KIB << 10)
        count = (FLOOD_MIB << 10) // BLOB_KIB
        ids: list[str] = []
        hwm: list[int] = []
        for half in range(2):  # the second half of the flood must not need more memory
            ids += [a.post("Bh", Blob(n, data)) for n in range(half * count // 2,
                                                               (half + 1) * count // 2)]
            assert a.flush(300), "the flood was not confirmed in txlog within 300 s"
            b.command("memory")
            hwm.append(json.loads(b.line())["VmHWM"])
        held = b.status()["held"]
        assert held["limit_bytes"] == HOLD_MIB << 20
        assert 0 < held["peak_bytes"] <= held["limit_bytes"], held
        assert held["refused"] > 0, held  # the rest was refused, to come through the log
        grown_mib = (hwm[1] - before["VmHWM"]) / 1024
        second_mib = (hwm[1] - hwm[0]) / 1024
        # bounded: the first half fills the held list (8 MiB) and a direct call's buffers;
        # the second half (50 MiB more) adds no more than one held list and one direct call
        # (the list may fill only then: a fresh clone saw 8.06 MiB once, against 8)
        assert second_mib < HOLD_MIB + DIRECT_MIB, (before, hwm, held)
        assert grown_mib < FLOOD_MIB * 3 / 4, (before, hwm, held)
        b.command("go")
        started = time.monotonic()
        inc = b.ready()
        wait_for(lambda: b.status()["phase"] == "normal", 300, 0.5, "B normal")
        wait_for(lambda: len(record.rows()) >= count, 600, 0.5, "every blob handled")
        rows = record.rows()
        handled = [mid for kind, i, mid, _ in rows if kind == "done" and i == inc]
        assert sorted(handled) == sorted(ids), "lost or handled twice"
        print({"flood_mib": FLOOD_MIB, "held": held, "hwm_grown_mib": round(grown_mib, 1),
               "second_half_mib": round(second_mib, 1),
               "after_go_s": round(time.monotonic() - started, 1)})
        b.stop()
    finally:
        a.stop()
    assert job.alive, job.log_tail()
