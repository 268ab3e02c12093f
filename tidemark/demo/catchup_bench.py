"""``tidemark bench catchup``: a peer down for a while under steady traffic, restarted with the
traffic going on; how long until it is back to normal, and what it held meanwhile.

Peers run as OS processes (:mod:`tidemark.demo.peer_proc`), as in ``tidemark demo``:

1. receiver B starts (replay on start, a fresh peer id: an empty queue) and reaches phase
   ``normal``; one or more senders send Ticks to B at ``rate`` messages/s in total, each up
   to ``window`` sends in flight (``Peer.send_nowait``), writing an id once Kafka confirmed
   it;
2. after ``live_s`` of traffic B is killed with SIGKILL; the traffic goes on for
   ``down_s``;
3. B restarts (a new process): it waits for the queues job to cover its barrier, replays its
   queue from a replica, hands over (live messages held back meanwhile) and goes ``normal``.
   The time to normal runs from the process's start (and, separately, from its
   ``Peer.start()`` call) to the moment its phase is ``normal`` (the child watches its phase
   every 20 ms; its status lines, sampled every ``every_s``, give the same to within that);
   the held-back messages and bytes, B's RSS, the replayed and forwarded counts are sampled
   meanwhile;
4. after ``after_s`` more seconds of traffic the senders stop, B handles the rest and stops
   cleanly; its ledger (every handler call, written without fsync: a
   SIGKILL of the process keeps it; an fsync per call would cap the handler at the disk's
   sync rate) is checked against the senders'
   confirmed ids: lost, applied twice, per-sender order. With the persisted dedup off (the
   default peer settings) a message the killed incarnation handled but whose ack died with
   it is handed to the next one again: ``redelivered_after_crash``, not a violation. Only an
   id handled twice by one incarnation, or again after its ack was in txlog (the killed
   incarnation's Ack/AckBatch records, read back from txlog), is ``applied_twice``.

The baseline, measured in the same run once everything stopped: a plain confluent-kafka
consumer reading the stretch of B's txlog partition that built up while B was down (from the
end offset just after the kill to the end offset at the restart), from its assignment to the
last record.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from tidemark.demo.ledger import incarnation_tally, read_handled, read_sent
from tidemark.demo.procs import PeerProcess, start_senders, wait_handled
from tidemark.demo.replay_bench import RssSampler, raw_consumer
from tidemark.log.exceptions import TidemarkError
from tidemark.log.offsets import end_offsets, watermarks
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.settings import Settings
from tidemark.stack.cpu_account import CpuAccount

__all__ = ["CatchupOptions", "bench_catchup", "render", "check_targets", "TARGET_NORMAL_S",
           "NEEDS"]

#: Issue 30's target: median time to normal of three runs at most this (one run: this)
TARGET_NORMAL_S = 15.0
NEEDS = ("bench catchup needs replica nodes and the Spark queues job (tidemark local up"
         " --replicas 2x2 --spark)")
Say = Callable[[str], None]
#: the replayer's stages, in order (``Peer.status()["replay"]["stage"]``)
STAGES = ("waiting for queues", "replay", "handover", "normal")


@dataclass(frozen=True)
class CatchupOptions:
    """Rates and durations of one run (seconds)."""

    rate: float = 1000.0         #: Ticks/s to B, all senders together
    senders: int = 2             #: sender processes sharing ``rate``
    window: int = 1000           #: sends in flight per sender
    live_s: float = 5.0          #: traffic with B up before the kill
    down_s: float = 60.0         #: traffic while B is down
    after_s: float = 5.0         #: traffic after B reached normal again
    dedup: bool = False          #: B with the persisted dedup store (PeerOptions.dedup_dir)
    handler_ms: float = 0.0      #: each handler call sleeps this long
    every_s: float = 0.25        #: seconds between B's status lines
    #: deadline for B to reach normal (either incarnation); past it after the restart, the
    #: senders stop and the run misses its target
    start_timeout_s: float = 300.0
    drain_timeout_s: float = 300.0  #: deadline for B to handle everything sent, at the end


def _loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


def stack_processes(settings: Settings, state_dir: str | None) -> dict[str, dict[str, int]]:
    """Pids of the local stack's live processes by kind (``broker``, ``replica``,
    ``spark``); raises :data:`NEEDS` when the replica nodes or (on a local stack) the Spark
    job are missing. Not a local stack (none in ``state_dir``): empty groups, and the Spark
    job is checked later by its progress on B's partition."""
    from tidemark.gossip.cluster_config import ConfigLog
    from tidemark.stack.launcher import LocalStack
    config = ConfigLog(settings)
    try:
        if config.read_to_end() is None:
            raise TidemarkError(NEEDS)
    finally:
        config.close()
    try:
        stack = LocalStack(state_dir)
    except TidemarkError:
        return {"broker": {}, "replica": {}, "spark": {}}
    procs = {kind: {s.name: s.pid for s in stack.processes(kind) if s.pid and stack.alive(s)}
             for kind in ("broker", "replica", "spark")}
    if stack.processes("replica") and (not procs["spark"] or not procs["replica"]):
        raise TidemarkError(NEEDS)
    return procs


def with_children(procs: dict[str, int]) -> dict[str, int]:
    """``procs`` and every live descendant of theirs (``name/pid``): the Spark job's JVM
    and Python workers run under the process the stack started. (Workers that exit before
    the window closes are left out of it: their CPU is counted in the machine's rest.)"""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    out = dict(procs)
    for name, pid in procs.items():
        todo = list(children.get(pid, []))
        while todo:
            child = todo.pop()
            out[f"{name}/{child}"] = child
            todo.extend(children.get(child, []))
    return out


def acked_ids(settings: Settings, peer: str, k: int, start: int, end: int) -> set[str]:
    """Ids covered by ``peer``'s Ack and AckBatch records in txlog/``k`` [start, end)."""
    from tidemark.log.consumer import read_to_end
    from tidemark.log.wire import default_codec
    codec, key = default_codec(), peer.encode()
    out: set[str] = set()
    if end <= start:
        return out
    for batch in read_to_end(settings, "txlog", marks={k: (start, end)}, timeout_s=120):
        for m in batch:
            off = m.offset()
            if m.key() != key or off is None or off >= end:
                continue
            try:
                d = codec.decode(m.value())
            except TidemarkError:
                continue
            if d.record.get("peer") != peer:
                continue
            if d.name == "Ack":
                out.add(d.record["message_id"])
            elif d.name == "AckBatch":
                out.update(d.record["message_ids"])
    return out


def raw_txlog_read(settings: Settings, k: int, start: int, end: int,
                   timeout_s: float = 120.0) -> dict[str, Any]:
    """A plain confluent-kafka consumer reading txlog/``k`` from ``start`` to ``end``:
    records, seconds from the assignment to the last record (``raw_seconds``: what a
    restarted reader pays, its first fetch included; a few thousand records come in one
    fetch) and from the first record to the last."""
    n = end - start
    if n <= 0:
        return {"raw_records": 0, "raw_seconds": 0.0, "raw_seconds_first_to_last": 0.0,
                "raw_records_per_s": None}
    consumer = raw_consumer(settings, "bench-catchup-raw")
    t0 = time.perf_counter()
    consumer.assign([TopicPartition(settings.topic("txlog"), k, start)])
    got, first, last, deadline = 0, 0.0, 0.0, time.monotonic() + timeout_s
    try:
        while last == 0.0:
            if time.monotonic() > deadline:
                raise TidemarkError(f"raw consumer read {got} of {n} records in {timeout_s}s")
            for m in consumer.consume(10_000, 0.5):
                if m.error() is not None:
                    continue
                if not first:
                    first = time.perf_counter()
                got += 1
                off = m.offset()
                if off is not None and off + 1 >= end:
                    last = time.perf_counter()
                    break
    finally:
        consumer.close()
    seconds = last - t0
    return {"raw_records": got, "raw_seconds": round(seconds, 4),
            "raw_seconds_first_to_last": round(last - first, 4),
            "raw_records_per_s": int(got / seconds) if seconds > 0 else None}


class _Samples:
    """What B's status lines said, one incarnation: peaks and when each stage was seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lines = 0
        self.held_messages = 0
        self.held_bytes = 0
        self.stage_at: dict[str, float] = {}   # first ``ts`` each stage / phase was seen
        self.normal_at: float | None = None    # first status line with phase normal

    def __call__(self, doc: dict[str, Any]) -> None:
        if doc.get("t") not in ("status", "ready", "normal"):
            return
        held = doc.get("held") or {}
        stage = (doc.get("replay") or {}).get("stage")
        ts = float(doc.get("ts") or time.time())
        with self.lock:
            self.lines += 1
            self.held_messages = max(self.held_messages, int(held.get("messages") or 0))
            self.held_bytes = max(self.held_bytes, int(held.get("bytes") or 0))
            if stage:
                self.stage_at.setdefault(str(stage), ts)
            if doc.get("phase") == "normal":
                self.stage_at.setdefault("phase normal", ts)
                if doc.get("t") == "status" and self.normal_at is None:
                    self.normal_at = ts


def _sent_ticks(senders: list[PeerProcess]) -> int:
    return sum(int(s.last.get("ticks", 0)) for s in senders)


def _traffic(say: Say, secs: float, senders: list[PeerProcess], what: str,
             every: float = 5.0) -> None:
    """Let the traffic run ``secs``; a progress line every ``every`` seconds."""
    end = time.monotonic() + secs
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(every, left))  # a timed phase of the bench, not a synchronisation
        for s in senders:
            if not s.alive():
                raise TidemarkError(f"sender {s.name} died: {s.stderr_tail()}")
        say(f"  {what}: {_sent_ticks(senders):,} Ticks sent")


def _is_normal(b: PeerProcess) -> bool:
    return "normal" in b.first or b.last.get("phase") == "normal"


def _watch(b: PeerProcess, backlog: int, timeout: float, say: Say) -> bool:
    """Progress lines until B's phase is normal (on a stage change, or every 5 s); False
    if it is not normal ``timeout`` seconds after its start. Raises if B exits."""
    deadline = b.spawned_at + timeout
    shown, shown_at = "", 0.0
    while not _is_normal(b):
        if not b.alive():
            raise TidemarkError(f"B2 exited {b.child.returncode} before phase normal:"
                                f" {b.stderr_tail()}")
        if time.time() > deadline:
            return False
        st = b.last
        rp, held = st.get("replay") or {}, st.get("held") or {}
        stage = f"{rp.get('stage', st.get('t', '-'))} (phase {st.get('phase', '-')})"
        now = time.time()
        if stage != shown or now - shown_at >= 5.0:
            say(f"  B2 {now - b.spawned_at:5.1f}s {stage}: replayed {st.get('replayed', 0):,}"
                f" (~{backlog:,} sent while down), forwarded {st.get('forwarded', 0):,},"
                f" held back {held.get('messages', 0):,}")
            shown, shown_at = stage, now
        time.sleep(0.05)  # the reader thread fills b.last; bounded by the deadline above
    return True


def _normal_at(b: PeerProcess, samples: _Samples) -> float | None:
    """When B's phase became normal: its own line (watched every 20 ms), else the first
    status line that said so; None if it never did."""
    if "normal" in b.first:
        return float(b.first["normal"].get("ts") or 0) or None
    return samples.normal_at


def bench_catchup(settings: Settings, opts: CatchupOptions, folder: Path,
                  state_dir: str | None = None, say: Say = print) -> dict[str, Any]:
    """The whole bench; returns the figures (see the module doc)."""
    procs = stack_processes(settings, state_dir)
    peer = f"bench-catchup-{secrets.token_hex(3)}"
    k = partition_for_peer(peer, len(watermarks(settings, "txlog")))
    folder.mkdir(parents=True, exist_ok=True)
    for f in folder.glob("*"):
        if f.suffix in (".ledger", ".sent", ".err"):
            f.unlink()
    ledger, dedup = folder / "B.ledger", folder / "dedup"
    shutil.rmtree(dedup, ignore_errors=True)
    load_before = _loadavg()
    running: list[PeerProcess] = []
    b1_start = end_offsets(settings, "txlog", [k])[k]

    def receiver(name: str, samples: _Samples | None = None) -> PeerProcess:
        argv = ["--every", str(opts.every_s), "receiver", "--id", peer, "--ledger",
                str(ledger), "--keep-repeats", "--no-fsync", "--handler-ms",
                str(opts.handler_ms)]
        if opts.dedup:
            argv += ["--dedup-dir", str(dedup)]
        # off: the default peer settings, whatever TIDEMARK_PEER_DEDUP_DIR says
        env: dict[str, str | None] = {} if opts.dedup else {"TIDEMARK_PEER_DEDUP_DIR": None}
        p = PeerProcess(name, argv, folder, state_dir, env=env, on_line=samples)
        running.append(p)
        return p

    try:
        say(f"start receiver B = {peer} (txlog/{k}; replay on start, dedup"
            f" {'on' if opts.dedup else 'off'}, handler {opts.handler_ms:g} ms)")
        b1 = receiver("B1")
        b1.wait_until(lambda d: d.get("phase") == "normal", opts.start_timeout_s,
                      "phase normal")
        if not procs["spark"]:  # not a local stack: is a queues job running somewhere?
            from tidemark.spark_streaming.depth import wait_for_progress
            try:
                wait_for_progress(settings, 60.0)
            except TidemarkError as exc:
                raise TidemarkError(f"{NEEDS}: {exc}") from None
        inc1 = str(b1.first.get("starting", {}).get("incarnation", ""))
        per = opts.rate / opts.senders
        senders = start_senders(
            {f"S{i + 1}": ["--id", f"{peer}-s{i + 1}", "--to", peer, "--rate", str(per),
                           "--publish-every", "0", "--window", str(opts.window)]
             for i in range(opts.senders)}, folder, state_dir, running)
        say(f"{opts.senders} sender(s): {opts.rate:g} Ticks/s to B in all, up to"
            f" {opts.window} sends in flight each")
        _traffic(say, opts.live_s, senders, "B up")
        handled_b1 = int(b1.last.get("ledger", 0))
        say(f"SIGKILL B1 (pid {b1.pid}) while the traffic goes on; it had handled"
            f" {handled_b1:,}")
        b1.kill()
        down_at = time.monotonic()
        k_down = end_offsets(settings, "txlog", [k])[k]
        ticks_down = _sent_ticks(senders)
        _traffic(say, opts.down_s - (time.monotonic() - down_at), senders, "B down")
        k_restart = end_offsets(settings, "txlog", [k])[k]
        ticks_restart = _sent_ticks(senders)
        down_s = time.monotonic() - down_at
        backlog = ticks_restart - ticks_down
        say(f"restart B: B2 ({backlog:,} Ticks sent while B was down, {k_restart - k_down:,}"
            f" records on txlog/{k}); the traffic goes on")
        samples = _Samples()
        b2 = receiver("B2", samples)
        account = CpuAccount({"peer": {"B2": b2.pid},
                              "senders": {s.name: s.pid for s in senders},
                              "replicas": procs["replica"],
                              "spark": with_children(procs["spark"]),
                              "brokers": procs["broker"]})
        account.start()
        with RssSampler({"B2": b2.pid}, period=opts.every_s) as rss:
            under_traffic = _watch(b2, backlog, opts.start_timeout_s, say)
            account.stop()
            for name, pid in list(account.groups["spark"].items()):
                if not Path(f"/proc/{pid}").exists():  # a Python worker of a Spark task
                    del account.groups["spark"][name]
            settle_at = time.monotonic() + 1.0  # the watcher's line may trail a status line
            while under_traffic and "normal" not in b2.first and time.monotonic() < settle_at:
                time.sleep(0.02)
            doc = b2.first.get("normal") or b2.last
            if under_traffic:
                say(f"B2 normal {(_normal_at(b2, samples) or 0) - b2.spawned_at:.1f}s after"
                    f" its start: replayed {doc.get('replayed', 0):,}, forwarded"
                    f" {doc.get('forwarded', 0):,}")
                _traffic(say, opts.after_s, senders, "B back",
                         every=max(opts.after_s / 2, 1.0))
            else:
                say(f"B2 not normal {opts.start_timeout_s:g}s after its start (phase"
                    f" {doc.get('phase')}, stage {(doc.get('replay') or {}).get('stage')}):"
                    f" stopping the senders")
            traffic_stopped = time.time()
            finals = {s.name: s.stop() for s in senders}
            sent = {s.name: read_sent(folder / f"{s.name}.sent") for s in senders}
            want = {mid for rows in sent.values() for mid, _, _ in rows}
            say(f"senders stopped: {len(want):,} sends confirmed; waiting for B to handle"
                f" them")
            wait_handled(b2, ledger, want, opts.drain_timeout_s, say)
            if not under_traffic:
                _watch(b2, backlog, time.time() - b2.spawned_at + 30.0, say)
            rss_report = rss.report("B2")
        b2_final = b2.stop()
    finally:
        for p in running:
            if p.alive():
                p.kill()
    handled = read_handled(ledger)
    say(f"reading B's acks on txlog/{k} (what the killed incarnation had acked)")
    acked = acked_ids(settings, peer, k, b1_start, k_restart)
    tally = incarnation_tally(sent, handled, {inc1}, acked)
    say(f"raw confluent-kafka consumer: txlog/{k} offsets {k_down:,} to {k_restart:,}")
    raw = raw_txlog_read(settings, k, k_down, k_restart)
    load_after = _loadavg()

    held = b2_final.get("held") or {}
    peak_m = max(int(held.get("peak_messages") or 0), samples.held_messages)
    peak_b = max(int(held.get("peak_bytes") or 0), samples.held_bytes)
    lim_m, lim_b = held.get("limit_messages"), held.get("limit_bytes")
    within = (None if lim_m is None or lim_b is None else
              bool(peak_m <= int(lim_m) and peak_b <= int(lim_b)))
    rp = b2_final.get("replay") or {}
    normal_at = _normal_at(b2, samples)
    to_normal = None if normal_at is None else round(normal_at - b2.spawned_at, 2)
    start_call = b2.first.get("starting", {}).get("ts")
    replayed, forwarded = int(b2_final.get("replayed", 0)), int(b2_final.get("forwarded", 0))
    stages = {s: round(t - b2.spawned_at, 2) for s, t in sorted(samples.stage_at.items(),
                                                                 key=lambda kv: kv[1])}
    cpu = account.report({"peer": account.used("peer"), "senders": account.used("senders"),
                          "replicas": account.used("replicas"), "spark": account.used("spark"),
                          "brokers": account.used("brokers")}, replayed + forwarded)
    result: dict[str, Any] = {
        "peer": peer, "partition": k, "options": asdict(opts),
        "achieved_rate": round(backlog / down_s, 1) if down_s > 0 else None,
        "down_s": round(down_s, 1), "sent_while_down": backlog,
        "backlog_records": k_restart - k_down, "txlog_down": k_down,
        "txlog_restart": k_restart,
        "normal_reached": normal_at is not None,
        "normal_under_traffic": under_traffic,
        "traffic_stopped_s": round(traffic_stopped - b2.spawned_at, 2),
        "time_to_normal_s": to_normal,
        "time_to_normal_from_start_call_s": (None if start_call is None or normal_at is None
                                             else round(normal_at - float(start_call), 2)),
        "time_to_normal_sampled_s": (None if samples.normal_at is None else
                                     round(samples.normal_at - b2.spawned_at, 2)),
        "stages_s": stages, "status_lines": samples.lines,
        "held": {"peak_messages": peak_m, "peak_bytes": peak_b, "limit_messages": lim_m,
                 "limit_bytes": lim_b, "refused": held.get("refused"),
                 "sampled_peak_messages": samples.held_messages,
                 "sampled_peak_bytes": samples.held_bytes, "within_bound": within,
                 "reported": bool(held)},
        "rss": rss_report, "replayed": replayed, "forwarded": forwarded,
        "replay": {key: rp.get(key) for key in ("barrier", "partition", "nodes", "retries",
                                                "replay_ms", "handover_ms",
                                                "handover_target", "duplicates_dropped")},
        "handled_by_b1": handled_b1,
        "sent_by": {n: {"ticks": f.get("ticks"), "failed": f.get("failed", 0)}
                    for n, f in finals.items()},
        "acked_by_b1": len(acked), **tally,
        **raw,
        "ratio": (round(to_normal / raw["raw_seconds"], 1)
                  if raw["raw_seconds"] and to_normal is not None else None),
        "cpu": cpu, "load_before": load_before, "load_after": load_after,
        "cores": os.cpu_count(), "target_normal_s": TARGET_NORMAL_S, "folder": str(folder),
    }
    result["misses"] = check_targets(result)
    result["ok"] = not result["misses"]
    return result


def check_targets(r: dict[str, Any]) -> list[str]:
    """The targets one run misses (empty: it meets them): B normal again within
    :data:`TARGET_NORMAL_S`, the held-back peak within its bound (a bound the peer does not
    report is a miss: it cannot be checked), nothing lost, nothing applied twice, no
    per-sender order broken."""
    misses = []
    if not r["normal_reached"] or not r.get("normal_under_traffic", True):
        misses.append(f"not normal while the traffic went on (stopped"
                      f" {r.get('traffic_stopped_s')} s after the restart; normal after"
                      f" {r['time_to_normal_s']} s)")
    elif r["time_to_normal_s"] > r["target_normal_s"]:
        misses.append(f"time to normal {r['time_to_normal_s']} s > {r['target_normal_s']} s")
    held = r["held"]
    if held["within_bound"] is None:
        misses.append("held-back bound not reported by the peer")
    elif not held["within_bound"]:
        misses.append(f"held back {held['peak_messages']} messages / {held['peak_bytes']}"
                      f" bytes beyond {held['limit_messages']} / {held['limit_bytes']}")
    for key in ("lost", "applied_twice", "out_of_order"):
        if r[key]:
            misses.append(f"{key.replace('_', ' ')}: {r[key]}")
    return misses


def _mib(n: Any) -> str:
    return "-" if n is None else f"{int(n) / 1048576:.1f} MiB"


def render(r: dict[str, Any]) -> str:
    """The figures as text (pure: the result document in)."""
    o = r["options"]
    verdict = "meets" if r["normal_reached"] and r.get("normal_under_traffic", True) and \
        r["time_to_normal_s"] <= r["target_normal_s"] else "MISSES"
    held = r["held"]
    bound = {None: "bound not reported", True: "within its bound",
             False: "BEYOND its bound"}[held["within_bound"]]
    lim = (f"limit {held['limit_messages']:,} messages / {_mib(held['limit_bytes'])}"
           if held["limit_messages"] is not None else "no limit reported")
    rss = r["rss"]
    stages = ", ".join(f"{s} {t} s" for s, t in r["stages_s"].items()) or "-"
    cpu = r["cpu"]
    lines = [
        f"B down {r['down_s']} s while {r['achieved_rate']:,} Ticks/s went to it (asked"
        f" {o['rate']:g}, {o['senders']} sender(s)); {r['sent_while_down']:,} sent meanwhile,"
        f" {r['backlog_records']:,} records on txlog/{r['partition']}",
        f"time to normal after the restart: {r['time_to_normal_s']} s from the process start,"
        f" {r['time_to_normal_from_start_call_s']} s from Peer.start() ({verdict} target <="
        f" {r['target_normal_s']:g} s; status lines: {r['time_to_normal_sampled_s']} s)"
        + ("" if r.get("normal_under_traffic", True) else
           f"; NOT under the traffic: the senders stopped {r.get('traffic_stopped_s')} s after"
           f" the restart"),
        f"  first seen (s after the process start): {stages}",
        f"raw confluent-kafka consumer, the same txlog stretch: {r['raw_records']:,} records"
        f" in {r['raw_seconds']} s ({r['raw_records_per_s'] or 0:,}/s); time to normal /"
        f" raw = {r['ratio']}",
        f"held back: peak {held['peak_messages']:,} messages, {_mib(held['peak_bytes'])}"
        f" ({lim}; {bound}; refused {held['refused']})",
        (f"B2 RSS: peak {rss['rss_peak_mib']} MiB sampled, VmHWM {rss['hwm_mib']} MiB"
         f" ({rss['samples']} samples)" if rss.get("sampled") else "B2 RSS: not sampled"),
        f"replayed {r['replayed']:,}, forwarded {r['forwarded']:,} (barrier"
        f" {r['replay']['barrier']}, replay {r['replay']['replay_ms']} ms, handover"
        f" {r['replay']['handover_ms']} ms)",
        f"ledger: {r['sent']:,} sent, lost {r['lost']}, applied twice {r['applied_twice']}"
        f" (one incarnation {r['twice_same_incarnation']}, after an ack"
        f" {r['twice_after_ack']}), redelivered after the crash"
        f" {r['redelivered_after_crash']:,}, out of order {r['out_of_order']}"
        f" (dedup {'on' if o['dedup'] else 'off'})",
        f"CPU until normal ({cpu['window_s']} s), cores: "
        + ", ".join(f"{k} {v}" for k, v in cpu["cores"].items()),
        f"machine: {r['cores']} cores, load average before {r['load_before']}, after"
        f" {r['load_after']}",
    ]
    if r["misses"]:
        lines.append("targets missed: " + "; ".join(r["misses"]))
    return "\n".join(lines)
