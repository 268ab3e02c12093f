"""``tidemark demo``: the replay scenario on a running local stack.

Peers run as separate OS processes (:mod:`tidemark.demo.peer_proc`):

1. receiver B starts (replay on start, an empty queue) and records what its handlers do;
2. senders A and C send Ticks to B and publish Notes (B subscribes) at a steady rate;
3. B is killed with SIGKILL while the traffic goes on; its queue grows;
4. B restarts: it replays its queue from a replica (progress shown), hands over, goes
   live, while A and C keep sending;
5. the senders stop, B handles the rest and stops; the summary compares every id the
   senders had confirmed with every id B's handlers recorded (fsync'ed ledger).

The run passes only if nothing is lost, nothing was applied twice and B2 replayed
something.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.demo.ledger import read_handled, read_sent, tally
from tidemark.demo.procs import PeerProcess, start_senders, wait_handled
from tidemark.log.exceptions import TidemarkError
from tidemark.log.settings import Settings

__all__ = ["DemoOptions", "run_demo"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoOptions:
    """Durations (seconds) and rates of the scenario."""

    rate: float = 150.0          #: Ticks per second per sender
    publish_every: int = 10      #: a Note every this many Ticks
    live_s: float = 10.0         #: traffic with B up before the kill
    down_s: float = 20.0         #: traffic while B is down
    after_s: float = 10.0        #: traffic after B is back
    settle_s: float = 180.0      #: deadline for B to handle everything sent
    start_timeout_s: float = 600.0  #: deadline for a receiver to start (replay included)


def _depths(settings: Settings) -> dict[str, Any]:
    from tidemark.spark_streaming.depth import depth_report
    try:
        return depth_report(settings)
    except TidemarkError as exc:
        return {"error": str(exc), "peers": {}, "total": None}


def _replica_status(addresses: list[str]) -> dict[str, Any]:
    from tidemark.gossip.service import fetch_status
    from tidemark.options import operator_transport
    try:
        return fetch_status(addresses, timeout=5.0, transport=operator_transport())
    except TidemarkError as exc:
        return {"error": str(exc)}


def _deadlettered(settings: Settings, peer: str) -> int | None:
    """Records in ``deadletter`` for ``peer`` (key ``peer`` or ``peer\\0...``, or a
    ``peer``/``recipient`` header); None if the topic cannot be read."""
    from tidemark.log.consumer import read_to_end
    mine, prefix = peer.encode(), peer.encode() + b"\0"
    n = 0
    try:
        for batch in read_to_end(settings, "deadletter", timeout_s=30):
            for m in batch:
                key = m.key() or b""
                heads = dict(m.headers() or [])
                if key == mine or key.startswith(prefix) or mine in (
                        heads.get("peer"), heads.get("recipient")):
                    n += 1
    except TidemarkError:
        return None
    return n


def _phase(say: Say, secs: float, senders: list[PeerProcess], what: str) -> None:
    end = time.monotonic() + secs
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(2.0, left))  # a timed phase of the scenario, not a synchronisation
        for s in senders:
            if not s.alive():
                raise TidemarkError(f"sender {s.name} died: {s.stderr_tail()}")
        sent = ", ".join(f"{s.name} {s.last.get('ticks', 0)} ticks/{s.last.get('notes', 0)}"
                         f" notes" for s in senders)
        say(f"  {what}: sent {sent}")


def _sent_count(senders: list[PeerProcess]) -> int:
    return sum(int(s.last.get("ticks", 0)) + int(s.last.get("notes", 0)) for s in senders)


def _watch_replay(b: PeerProcess, backlog: int, timeout: float, say: Say) -> None:
    """Progress lines while B2 replays and hands over (on change, or every 5 s)."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    shown, shown_at = "", 0.0
    while not b.ready.is_set():
        if time.monotonic() > deadline or not b.alive():
            b.wait_ready(0)  # raises with the child's stderr
        st = b.last
        rp = st.get("replay") or {}
        stage = rp.get("stage", "-")
        line = (f"stage {stage}: replayed {st.get('replayed', 0)} (~{backlog} sent to B"
                f" while it was down), forwarded {st.get('forwarded', 0)}, handled"
                f" {st.get('ledger', 0)}")
        if stage == "replay" and not rp.get("replay_received"):
            line += "; the replica waits until the queues job covers the barrier"
        now = time.monotonic()
        if line != shown or now - shown_at >= 5.0:
            say(f"  B2 {now - t0:5.1f}s {line}")
            shown, shown_at = line, now
        b.ready.wait(0.5)


def run_demo(settings: Settings, folder: Path, replica_addresses: list[str],
             opts: DemoOptions, say: Say, state_dir: str | None = None) -> dict[str, Any]:
    """Run the scenario; returns the summary document (``ok`` says whether it passed)."""
    folder.mkdir(parents=True, exist_ok=True)
    ledger = folder / "B.ledger"
    dedup = folder / "dedup"  # B's persisted dedup store (the library's), fresh every run
    shutil.rmtree(dedup, ignore_errors=True)
    for f in folder.glob("*"):
        if f.suffix in (".ledger", ".sent", ".err"):
            f.unlink()
    procs: list[PeerProcess] = []

    def receiver(name: str) -> PeerProcess:
        p = PeerProcess(name, ["receiver", "--id", "B", "--ledger", str(ledger),
                               "--dedup-dir", str(dedup)], folder, state_dir)
        procs.append(p)
        return p

    try:
        say("start receiver B (replay on start, an empty queue; waits for the queues job)")
        b1 = receiver("B1")
        b1.wait_ready(opts.start_timeout_s)
        senders = start_senders(
            {sid: ["--id", sid, "--to", "B", "--rate", str(opts.rate), "--publish-every",
                   str(opts.publish_every)] for sid in ("A", "C")}, folder, state_dir, procs)
        say(f"senders A and C: up to {opts.rate:g} Ticks/s each to B, a Note published every"
            f" {opts.publish_every}")
        _phase(say, opts.live_s, senders, "B up")
        before = dict(b1.last)
        at_kill = _sent_count(senders)
        say(f"SIGKILL B1 (pid {b1.pid}) while the traffic goes on; it had handled"
            f" {before.get('ledger', 0)}")
        b1.kill()
        _phase(say, opts.down_s, senders, "B down")
        backlog = _sent_count(senders) - at_kill
        say(f"restart B: B2 replays its queue (~{backlog} messages were sent to B while it was"
            f" down), hands over, goes live; A and C keep sending")
        t0 = time.monotonic()
        b2 = receiver("B2")
        _watch_replay(b2, backlog, opts.start_timeout_s, say)
        up = b2.wait_ready(0)
        say(f"B2 up in {time.monotonic() - t0:.1f}s: replayed {up.get('replayed')},"
            f" forwarded {up.get('forwarded')}")
        _phase(say, opts.after_s, senders, "B back")
        finals = {s.name: s.stop() for s in senders}
        sent = {s.name: read_sent(folder / f"{s.name}.sent") for s in senders}
        want = {mid for rows in sent.values() for mid, _, _ in rows}
        say(f"senders stopped: {len(want)} messages sent; waiting for B to handle them")
        wait_handled(b2, ledger, want, opts.settle_s, say)
        b2_final = b2.stop()
        handled = read_handled(ledger)
        t = tally(sent, handled)
        say("waiting for B's queue to empty (the queues job reads B's acks)")
        depths = _depths(settings)
        end = time.monotonic() + 60
        while depths["peers"].get("B", 0) and time.monotonic() < end:
            time.sleep(2.0)  # polling the queues topic, bounded by the deadline above
            depths = _depths(settings)
        status = _replica_status(replica_addresses)
        b1_stats = before.get("stats", {})
        b2_stats = b2_final.get("stats", {})
        rp = b2_final.get("replay", {})
        result = {
            "sent": t.sent,
            "sent_by": {n: {"ticks": f.get("ticks"), "notes": f.get("notes")}
                        for n, f in finals.items()},
            "handled": t.handled, "delivered_live": t.live, "handled_from_log": t.from_log,
            "replayed": b2_final.get("replayed", 0),
            "forwarded": b2_final.get("forwarded", 0),
            "replay_duplicates_dropped": rp.get("duplicates_dropped", 0),
            "duplicates_dropped": b1_stats.get("duplicates", 0) + b2_stats.get("duplicates", 0),
            "redelivered_after_kill": b2_final.get("redelivered", 0),
            "completed_before_kill": b2_stats.get("completed_before", 0),
            "deadlettered": _deadlettered(settings, "B"),
            "lost": len(t.lost), "lost_ids": t.lost[:20],
            "handled_twice": len(t.twice), "twice_ids": t.twice[:20],
            "unexpected": t.unexpected, "out_of_order": t.out_of_order,
            "replay": {k: rp.get(k) for k in ("barrier", "partition", "nodes", "retries",
                                              "replay_ms", "handover_ms", "handover_target")},
            "stable_cut": status.get("ust"), "gc_point": status.get("gc_point"),
            "pins": len(status.get("pins", []) or []),
            "status_error": status.get("error"),
            "queue_depths": {"B": depths["peers"].get("B", 0), "total": depths.get("total")},
            "folder": str(folder),
        }
        # what B missed came back from the log: replayed from the replicas, or forwarded from
        # txlog where the queues job had not covered it yet (a replay does not wait for it)
        result["ok"] = (result["lost"] == 0 and result["handled_twice"] == 0
                        and result["out_of_order"] == 0
                        and result["replayed"] + result["forwarded"] > 0)
        return result
    finally:
        for p in procs:
            if p.alive():
                p.kill()
