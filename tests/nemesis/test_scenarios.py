"""Scenarios on the namespaced topology (``make nemesis``): three brokers and a replica pair
(p0r0, p0r1 owning every txlog partition) each on a host of its own, a sender and a recipient
peer each on a host of their own, real traffic at durability ``all`` (the stable cut gates
every confirmation), a seeded nemesis, and the checker over the recorded history. Each
scenario prints one JSON summary: the nemesis events, the verdicts and the counts. A failing
checker names the first violating id or offset. Every scenario asserts the same verdicts:
nothing confirmed lost or handled twice, per-sender order, the cut never over-claims, no node
released a Send before its Ack lay below its GC point, and after healing the pair converges
(equal interval maps and digests) within the bound docs/partitions.md states.

- **replica isolated then healed** (2 seeds): one node (chosen by the seed) is cut from every
  other host for a while under traffic: confirmations stall (the cut cannot claim what the
  isolated node does not hold);
- **co-replicas split**: p0r0 and p0r1 cannot reach each other but both reach the brokers
  (gossip between them stops; each keeps ingesting);
- **sender and recipient split**: the direct path between the two peers is cut, the log path
  is up: what the sender could not deliver directly reaches the recipient through txlog;
- **one broker isolated** (chosen by the seed): leaders move, producers and consumers fail
  over;
- **1% loss on every link** for a minute (nftables drops packets at random);
- **50 ms ± 20 ms delay, 1% loss on every link** for a minute: netem's ``delay 50ms 20ms
  loss 1%`` on every host's outgoing packets (netem when the kernel has it, else the
  nemesis's user-space delayer over NFQUEUE);
- **a replica's clock 5 min ahead**, and **5 min behind**: the
  node (chosen by the seed) is SIGKILLed and restarted with its clock moved
  (``TIDEMARK_CLOCK_SKEW_MS``), runs skewed under
  traffic, then is restarted on the true clock. A node ahead has its gossip refused as
  stamped in the future; one behind has its new states refused as older than the last it
  sent: either way its contribution to the cut stalls, and the cut must not leap.

Each scenario runs with 2 seeds. Then, with the Spark queues job added on a host of its own
(2 seeds too):

- **the replica serving a replay isolated mid-stream**: the recipient restarts after a
  backlog built up, and the replica streaming its replay is cut off; the peer gives it up
  after its stall timeout and resumes on the other replica.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.nemesis.conftest import PARTITIONS
from tests.nemesis.recorder import Recorder, sends_and_acks
from tests.support import HandlerLog, PeerScript, wait_for
from tidemark.log.offsets import end_offsets
from tidemark.log.partitioner import partition_for_peer
from tidemark.nemesis import (
    Bounds,
    Confirmed,
    Convergence,
    Event,
    Handled,
    History,
    Sample,
    check,
)
from tidemark.nemesis.faults import SKEW_KEYS, Nemesis
from tidemark.replica.config import load_cluster_file
from tidemark.spark_streaming.depth import ProgressTracker
from tidemark.stack.hosts import Hosts
from tidemark.stack.launcher import LocalStack
from tidemark.stack.replicas import CONFIG_NAME, plan
from tidemark.stack.spark import plan as spark_plan

pytestmark = [pytest.mark.nemesis, pytest.mark.timeout(900)]

#: How long co-replicas may take to converge after healing (docs/partitions.md).
CONVERGE_S = 30.0

# A sender on its host. argv: state dir, peer id, recipient, confirmed file, rate.
# stdin: "stop" (answers "stopped" once every send is settled), "status".
SENDER = textwrap.dedent("""
    import os, sys, threading, time
    from tidemark.log.settings import load_settings
    from tidemark.peer_client import Peer
    from tests.support import Job, serve_peer

    state, peer_id, to, path, rate = sys.argv[1:6]
    peer = Peer(peer_id, None, load_settings(state_dir=state))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stop = threading.Event()

    def confirmed(n, handle):
        if handle.exception() is None:
            os.write(fd, f"{handle.message_id} {n}\\n".encode())

    def traffic():
        n, every = 0, 1 / float(rate)
        t = time.monotonic()
        while not stop.is_set():
            d = peer.send_nowait(to, Job(n), "all")
            d.add_done_callback(lambda h, n=n: confirmed(n, h))
            n += 1
            t += every
            time.sleep(max(0.0, t - time.monotonic()))

    def halt():
        stop.set()
        peer.flush(60)

    peer_started = threading.Event()
    threading.Thread(target=lambda: (peer_started.wait(), traffic()), daemon=True).start()
    serve_peer(peer, {"halt": halt, "go": peer_started.set})
""")

# The recipient on its host (persisted dedup store and replay on). argv: state dir, peer id, record
# file, dedup folder[, inbox limit, handler time in ms while the replay streams, replay batch].
RECIPIENT = textwrap.dedent("""
    import sys, time
    from tidemark.log.settings import load_settings
    from tidemark.peer_client import MessageContext, Peer, PeerOptions
    from tidemark.peer_client.replay import ReplicaReplayer
    from tests.support import HandlerRecord, Job, serve_peer

    state, peer_id, path, dedup = sys.argv[1:5]
    limit, pause, batch = ((int(sys.argv[5]), int(sys.argv[6]) / 1000, int(sys.argv[7]))
                           if len(sys.argv) > 7 else (0, 0, 0))
    record = HandlerRecord(path, fsync=False)
    settings = load_settings(state_dir=state)
    options = PeerOptions(dedup_dir=dedup, **({"inbox_limit": limit} if limit else {}))
    # replay on, as in production: its txlog follower delivers what the sender appended
    # unmarked because its direct call failed
    # a small batch and window: the replica streams as the handlers go, not all at once
    replayer = ReplicaReplayer(settings, **({"batch": batch, "window": batch} if batch else {}))
    peer = Peer(peer_id, None, settings, options, replayer=replayer)

    def on_job(msg: Job, ctx: MessageContext) -> None:
        if pause and replayer.stage == "replay":  # a slow replay stream; the rest at full speed
            time.sleep(pause)
        record.write("done", peer.incarnation, ctx.message_id, msg.n)

    peer.handler(Job)(on_job)
    serve_peer(peer)
""")


def _confirmed(path: Path, sender: str) -> list[Confirmed]:
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line]
    return sorted((Confirmed(mid, int(n)) for mid, n in rows), key=lambda c: c.seq)


def _isolate_replica(ctx: "Scenario") -> dict[str, object]:
    victim = sorted(ctx.nodes)[ctx.seed % len(ctx.nodes)]
    ctx.nemesis.isolate(ctx.hosts.add(victim).name)
    return {"victim": victim}


def _split_replicas(ctx: "Scenario") -> dict[str, object]:
    a, b = sorted(ctx.nodes)
    ctx.nemesis.partition([ctx.hosts.add(a).name], [ctx.hosts.add(b).name])
    return {"a": a, "b": b}


def _split_peers(ctx: "Scenario") -> dict[str, object]:
    ctx.nemesis.partition([ctx.sender_host], [ctx.recipient_host])
    return {"a": ctx.sender_host, "b": ctx.recipient_host}


def _isolate_broker(ctx: "Scenario") -> dict[str, object]:
    victim = f"broker-{1 + ctx.seed % 3}"
    ctx.nemesis.isolate(ctx.hosts.add(victim).name)
    return {"victim": victim}


def _skew_replica(ctx: "Scenario", seconds: float) -> dict[str, object]:
    victim = sorted(ctx.nodes)[ctx.seed % len(ctx.nodes)]
    # the remedy first: a node that fails to start skewed is restarted on the true clock
    ctx.undo.append(lambda: (ctx.restart_node(victim, {}),
                             ctx.nemesis.skewed(ctx.hosts.add(victim).name, 0.0)))
    ctx.restart_node(victim, ctx.nemesis.skew_env(seconds))
    ctx.nemesis.skewed(ctx.hosts.add(victim).name, seconds)
    return {"victim": victim, "skew_s": seconds}


def _loss_everywhere(ctx: "Scenario") -> dict[str, object]:
    for host in sorted(ctx.hosts.hosts):
        ctx.nemesis.loss(host, 1.0)
    return {"loss_percent": 1.0, "hosts": len(ctx.hosts.hosts)}


def _delay_everywhere(ctx: "Scenario") -> dict[str, object]:
    """netem's ``delay 50ms 20ms loss 1%`` on every host's link: each packet leaving a host
    is delayed 30-70 ms, and 1 % of them are dropped."""
    for host in sorted(ctx.hosts.hosts):
        ctx.nemesis.delay(host, 50, 20)
        ctx.nemesis.loss(host, 1.0, both_ways=False)
    return {"delay_ms": 50, "jitter_ms": 20, "loss_percent": 1.0,
            "hosts": len(ctx.hosts.hosts)}


class Scenario:
    """What a fault function may touch: the stack, its hosts, the nemesis, the replica nodes
    and the peers' hosts. A fault that the nemesis cannot heal (a process restarted with a
    skewed clock) appends its own remedy to ``undo``, run in order after the heal."""

    def __init__(self, stack: LocalStack, hosts: Hosts, nemesis: Nemesis,
                 nodes: dict[str, str], seed: int, sender_host: str,
                 recipient_host: str) -> None:
        self.stack, self.hosts, self.nemesis, self.nodes = stack, hosts, nemesis, nodes
        self.seed, self.sender_host, self.recipient_host = seed, sender_host, recipient_host
        self.undo: list[Callable[[], object]] = []

    def restart_node(self, node: str, env: dict[str, str]) -> None:
        """SIGKILL replica node ``node`` and start it again with ``env`` over the stack's
        environment for it (``{}``: none beyond the stack's)."""
        spec = next(p for p in self.stack.processes("replica") if p.name == node)
        self.stack.kill(node)
        wait_for(lambda: not self.stack.alive(spec), 30, 0.05, f"{node} gone")
        spec.env = {k: v for k, v in spec.env.items() if k not in SKEW_KEYS} | env
        self.stack.ensure(spec, timeout_s=120)

    def heal(self) -> None:
        """Heal the network, then run the faults' own remedies (each once)."""
        self.nemesis.heal()
        while self.undo:
            self.undo.pop(0)()


#: Verdicts a scenario is known to fail today: none. (Per-sender order after a failed
#: direct call was one until the sender's ``log_floor``; docs/partitions.md.)
KNOWN_VIOLATIONS: dict[str, set[str]] = {}

SCENARIOS: dict[str, Callable[[Scenario], dict[str, object]]] = {
    "replica isolated then healed": _isolate_replica,
    # long enough for TCP's retransmission back-off to outlast the heal by tens of seconds
    # unless the clients drop dead connections themselves (docs/partitions.md)
    "replica isolated for 75 s": _isolate_replica,
    "co-replicas split": _split_replicas,
    "sender and recipient split": _split_peers,
    "one broker isolated": _isolate_broker,
    "1% loss on every link": _loss_everywhere,
    "50 ms ± 20 ms delay, 1% loss on every link": _delay_everywhere,
    "a replica's clock 5 min ahead": lambda ctx: _skew_replica(ctx, SKEW_S),
    "a replica's clock 5 min behind": lambda ctx: _skew_replica(ctx, -SKEW_S),
}
#: How far the skewed node's wall clock is moved (seconds).
SKEW_S = 300.0
#: How long a scenario's fault lasts, in seconds (a window of time under traffic).
FAULT_S = {"1% loss on every link": 60.0, "50 ms ± 20 ms delay, 1% loss on every link": 60.0,
            "replica isolated for 75 s": 75.0, "a replica's clock 5 min ahead": 20.0,
           "a replica's clock 5 min behind": 20.0}


class Run:
    """One scenario's run: a sender and a recipient peer on hosts of their own, the nemesis,
    the recorder; :meth:`finish` drains the traffic, waits for the pair to converge, and
    judges the recorded history with the checker."""

    def __init__(self, stack: LocalStack, hosts: Hosts, tag: str, seed: int, tmp_path: Path,
                 peer_scripts: Callable[..., PeerScript]) -> None:
        self.stack, self.hosts, self.tmp_path, self.scripts = stack, hosts, tmp_path, peer_scripts
        cf = load_cluster_file(stack.state_dir / CONFIG_NAME)
        self.nodes = {n.node_id: n.address for n in cf.nodes.values()}
        self.sender, self.recipient = f"S{tag}", f"R{tag}"
        self.record = HandlerLog(tmp_path / "handled.log")
        self.confirmed_file = tmp_path / "confirmed.log"
        self.nemesis = Nemesis(hosts, seed)
        self.recorder = Recorder(self.nodes).start()
        self.recipient_host = hosts.add(f"peer-{self.recipient.lower()}")
        self.sender_host = hosts.add(f"peer-{self.sender.lower()}")
        self.ctx = Scenario(stack, hosts, self.nemesis, self.nodes, seed,
                            self.sender_host.name, self.recipient_host.name)
        self.healed_at = 0
        #: ms after healing at which each step of :meth:`finish` was done
        self.after_heal: dict[str, int] = {}

    def start_recipient(self, *args: str) -> PeerScript:
        """The recipient (``RECIPIENT``; ``args``: its inbox limit, the handler's time in ms
        while its replay streams and the replay's batch and window)."""
        return self.scripts(self.stack, self.recipient, RECIPIENT, str(self.record.path),
                            str(self.tmp_path / "dedup"), *args, host=self.recipient_host)

    def start_sender(self, rate: int) -> PeerScript:
        """The sender at ``rate`` messages a second, once told ``go``."""
        s = self.scripts(self.stack, self.sender, SENDER, self.recipient,
                         str(self.confirmed_file), str(rate), host=self.sender_host)
        s.ready()
        return s

    def start_traffic(self, before: str) -> tuple[PeerScript, PeerScript]:
        """Start the recipient, then the sender at 200 messages a second; returns both once
        500 messages are confirmed (``before``: what they come before, for a timeout)."""
        r = self.start_recipient()
        r.ready()
        s = self.start_sender(200)
        s.command("go")
        self.wait_confirmed(500, f"traffic confirmed {before}", 120)
        return r, s

    def confirmed(self) -> int:
        return len(_confirmed(self.confirmed_file, self.sender))

    def wait_confirmed(self, n: int, what: str, timeout_s: float = 180) -> None:
        wait_for(lambda: self.confirmed() >= n, timeout_s, 0.2, what)

    def heal(self) -> None:
        self.ctx.heal()
        self.healed_at = int(time.time() * 1000)

    def finish(self, s: PeerScript, r: PeerScript) -> tuple[list[Confirmed], int]:
        """Halt the sender, wait until the recipient handled every confirmed message, stop
        both, and wait for the co-replicas to converge; the confirmed messages and when
        they converged."""
        s.command("halt")
        self.mark("halted")
        sent = _confirmed(self.confirmed_file, self.sender)
        ids = {c.message_id for c in sent}
        wait_for(lambda: ids <= {mid for _, _, mid, _ in self.record.rows()}, 180, 0.2,
                 "every confirmed message handled")
        self.mark("handled")
        s.stop()  # nothing more is appended (the recipient's last acks included) before the
        r.stop()  # co-replicas' final states are compared
        self.mark("stopped")

        def converged() -> bool:
            samples = [self.recorder.sample(n) for n in self.nodes]
            maps = [{k: p.held for k, p in x.partitions.items()} for x in samples if x]
            return len(maps) == len(self.nodes) and all(m == maps[0] for m in maps)
        wait_for(converged, CONVERGE_S * 2, 0.2, "co-replicas converged")
        self.mark("converged")
        return sent, int(time.time() * 1000)

    def caught_up(self) -> int | None:
        """ms after healing at which every node held, in every partition, the log up to
        where the furthest node had it at the heal (None: never seen)."""
        def top(x: Sample, k: int) -> int:
            return max((r[1] for r in x.partitions[k].held), default=0)
        goal: dict[int, int] = {}
        for x in self.recorder.samples:
            if x.t_ms <= self.healed_at:
                for k in x.partitions:
                    goal[k] = max(goal.get(k, 0), top(x, k))
        seen: dict[str, int] = {}
        for x in self.recorder.samples:
            if x.t_ms > self.healed_at and x.node not in seen and \
                    all(top(x, k) >= goal.get(k, 0) for k in x.partitions):
                seen[x.node] = x.t_ms - self.healed_at
        return max(seen.values()) if len(seen) == len(self.nodes) else None

    def dedup_window(self) -> set[str]:
        """The dedup store's one window: the last id each incarnation but the last handled
        (one sender here), which a SIGKILL between the handler's return and the store's put
        runs again."""
        last: dict[str, str] = {}
        for kind, inc, mid, _ in self.record.rows():
            if kind == "done":
                last.pop(inc, None)
                last[inc] = mid  # dicts keep insertion order: the last incarnation comes last
        return set(list(last.values())[:-1])

    def mark(self, step: str) -> None:
        """Note when ``step`` of the run's end happened, in ms after healing (printed)."""
        if self.healed_at:
            self.after_heal[step] = int(time.time() * 1000) - self.healed_at

    def close(self) -> None:
        self.ctx.heal()
        self.recorder.stop()

    def judge(self, name: str, seed: int, sent: list[Confirmed], converged_at: int,
              detail: dict[str, object]) -> dict[str, object]:
        """Build the history, run the checker, print the summary; fails on any verdict
        beyond ``KNOWN_VIOLATIONS``."""
        partitions = list(range(PARTITIONS))
        recorder = self.recorder
        history = History(
            events=[Event(e["t_ms"], e["kind"], {k: v for k, v in e.items()
                                                 if k not in ("t_ms", "kind")})
                    for e in self.nemesis.events],
            confirmed={self.sender: sent},
            handled={self.recipient: [Handled(inc, mid, self.sender, n)
                                      for kind, inc, mid, n in self.record.rows()
                                      if kind == "done"]},
            dedup={self.recipient: True},
            dedup_window=self.dedup_window(),
            samples=recorder.samples,
            owners={k: sorted(self.nodes) for k in partitions},
            acks=(acks := sends_and_acks(self.stack.settings(), self.recipient, partitions)),
            final=recorder.final(partitions, acks))
        history.final.pairs = [Convergence(k, tuple(sorted(self.nodes)), self.healed_at,
                                           converged_at) for k in partitions]
        recorder.close()
        report = check(history, Bounds(converge_s=CONVERGE_S))
        summary = {"scenario": name, "seed": seed, **detail,
                   "events": [e.to_dict() for e in history.events], "confirmed": len(sent),
                   "after_heal_ms": {**self.after_heal, "caught_up": self.caught_up()},
                   "samples": len(recorder.samples),
                   "unanswered_samples": recorder.unanswered, "report": report.to_dict()}
        print(json.dumps(summary))
        known = KNOWN_VIOLATIONS.get(name, set())
        assert set(report.to_dict()["failed"]) <= known, json.dumps(report.to_dict())
        return summary


@pytest.mark.parametrize("name,seed", [(name, seed) for name in SCENARIOS for seed in (1, 2)])
def test_scenario(hosts_cluster: tuple[LocalStack, Hosts], name: str, seed: int,
                  tmp_path: Path, peer_scripts: Callable[..., PeerScript]) -> None:
    stack, hosts = hosts_cluster
    run = Run(stack, hosts, f"{list(SCENARIOS).index(name)}{seed}", seed, tmp_path,
              peer_scripts)
    try:
        r, s = run.start_traffic("before the fault")
        detail = SCENARIOS[name](run.ctx)
        before = run.confirmed()
        # the fault's length: a window of time under traffic, not a synchronisation
        time.sleep(FAULT_S.get(name, 8 + seed % 3))
        during = run.confirmed() - before
        run.heal()
        run.wait_confirmed(before + during + 500, "traffic confirmed after healing")
        sent, converged_at = run.finish(s, r)
    finally:
        run.close()
    run.judge(name, seed, sent, converged_at, {**detail, "confirmed_during_fault": during})


#: Messages sent to the recipient while it is down, which its replay then streams.
REPLAY_BACKLOG = 4000


@pytest.mark.parametrize("seed", [1, 2])
def test_the_replica_serving_a_replay_isolated_mid_stream(
        hosts_cluster: tuple[LocalStack, Hosts], tmp_path: Path, seed: int,
        peer_scripts: Callable[..., PeerScript]) -> None:
    """The recipient is SIGKILLed under traffic and restarts while the sender goes on; its
    replay (paced by a small inbox and a slow handler) is streaming from one replica when
    the nemesis isolates that replica's host. A partition drops packets: the stream does not
    fail, it goes silent. The peer gives the silent replica up after its stall timeout and
    resumes on the other replica after the last offset it received; then the usual verdicts
    (nothing confirmed lost or handled twice, order, cut, release, convergence)."""
    stack, hosts = hosts_cluster
    stack.up(brokers=3, extra=[lambda st: plan(st, "1x2"), spark_plan], timeout_s=300)
    run = Run(stack, hosts, f"Q{seed}", seed, tmp_path, peer_scripts)
    settings = stack.settings()
    k = partition_for_peer(run.recipient, PARTITIONS)
    try:
        r1, s = run.start_traffic("before the kill")
        r1.sigkill()
        run.wait_confirmed(run.confirmed() + REPLAY_BACKLOG, "traffic while the recipient is down")
        end = end_offsets(settings, "txlog")[k]
        tracker = ProgressTracker(settings)
        try:
            wait_for(lambda: tracker.poll(0.5).get(k, 0) >= end, 300, 0,
                     "the queues job covering the recipient's backlog")
        finally:
            tracker.close()
        # inbox limit 200, 3 ms a message while the replay streams, batches of 100: the
        # replica streams for several seconds, as the handlers ack
        r2 = run.start_recipient("200", "3", "100")

        def serving() -> str | None:
            r2.command("status")
            line = r2.line()
            assert not line.startswith("ready"), "the replay ended before the isolation"
            rep = json.loads(line).get("replay") or {}
            assert rep.get("stage") not in ("handover", "normal"), \
                f"the replay ended before the isolation: {rep}"
            return rep["nodes"][-1] if rep.get("nodes") and rep.get("replayed") else None
        victim = str(wait_for(serving, 300, 0.05, "the replica serving the replay"))
        run.nemesis.isolate(hosts.add(victim).name)
        r2.ready()                        # start() returns: replayed, handed over, normal
        rep = r2.status()["replay"]
        run.heal()
        run.wait_confirmed(run.confirmed() + 500, "traffic confirmed after healing")
        sent, converged_at = run.finish(s, r2)
    finally:
        run.close()
    assert rep["retries"] >= 1 and rep["nodes"][0] == victim and rep["nodes"][-1] != victim, rep
    run.judge("the replica serving a replay isolated", seed, sent, converged_at,
              {"victim": victim, "replayed": rep["replayed"], "retries": rep["retries"],
               "nodes": rep["nodes"], "replay_ms": rep["replay_ms"]})
