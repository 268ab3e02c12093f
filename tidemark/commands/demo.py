"""``tidemark demo`` (the replay scenario on the local stack), ``tidemark bench replay`` and
``tidemark bench catchup``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tidemark.bench import targets
from tidemark.gossip.replay import DEFAULT_BATCH, DEFAULT_WINDOW
from tidemark.options import (
    add_bench_check,
    add_command,
    add_rounds_args,
    bench_exit,
    cluster_file,
    print_json,
    progress,
    replica_switch,
    settings_from_args,
)

__all__ = ["register"]


def _say(msg: str) -> None:
    print(msg, flush=True)


def _demo(args: argparse.Namespace) -> int:
    from tidemark.demo.report import render
    from tidemark.demo.scenario import DemoOptions, run_demo
    from tidemark.log.settings import default_state_dir
    from tidemark.replica.config import load_cluster_file
    settings = settings_from_args(args)
    addresses = [n.address for n in load_cluster_file(cluster_file(args)).nodes.values()]
    state = Path(args.state_dir) if args.state_dir else default_state_dir()
    folder = Path(args.folder) if args.folder else state / "demo"
    opts = DemoOptions(rate=args.rate, live_s=args.live, down_s=args.down, after_s=args.after)
    result = run_demo(settings, folder, addresses, opts, _say, state_dir=args.state_dir)
    (folder / "summary.json").write_text(json.dumps(result, indent=2))
    if args.json:
        print_json(result)
    else:
        print(render(result))
    return 0 if result["ok"] else 1


def _bench_replay(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from tidemark.bench.security import side_by_side
    from tidemark.demo.replay_bench import bench_replay
    with ExitStack() as exits:
        switch, reason = replica_switch(args, exits)
        r: dict[str, Any] = bench_replay(
            settings_from_args(args), messages=args.messages,
            payload_bytes=args.payload_bytes, fill_mode=args.fill, state_dir=args.state_dir,
            timeout_s=args.timeout, say=progress, batch=args.batch, window=args.window,
            settle_s=args.settle, handler=args.handler, switch=switch,
            pairs=args.security_pairs, security_messages=args.security_messages,
            skip_reason=reason, ack_pairs=args.ack_pairs)
    if args.json:
        print_json(r)
        return bench_exit(args, r)
    rate_ok = "meets" if r["peer_msgs_per_s"] >= r["target_msgs_per_s"] else "BELOW"
    ratio_ok = "meets" if (r["ratio"] or 0) >= r["target_ratio"] else "BELOW"
    loop_ok = "meets" if (r["user_loop_ratio"] or 0) >= r["target_user_loop_ratio"] else "BELOW"

    def machine(key: str) -> str:
        return f"machine {(r[key] or {}).get('us_per_msg', {}).get('machine')} us/msg"
    print(f"raw confluent-kafka consumer (the limit)          : {r['raw_msgs_per_s']:>10,}"
          f" msgs/s  {machine('raw_cpu')}")
    print(f"the user's loop (consumer+fastavro+decode+commit) : {r['user_loop_msgs_per_s']:>10,}"
          f" msgs/s  {machine('user_loop_cpu')}")
    print(f"replica replay -> Peer {r['handler']:6} handler            :"
          f" {r['peer_msgs_per_s']:>10,} msgs/s  {machine('cpu')}; ratio {r['ratio']} to raw,"
          f" {r['user_loop_ratio']} to the user's loop")
    print(f"({rate_ok} target >= {r['target_msgs_per_s']:,} msgs/s; {ratio_ok} target ratio"
          f" >= {r['target_ratio']}; {loop_ok} target >= {r['target_user_loop_ratio']} x the"
          f" user's loop; machine target <= {r['target_machine_us_per_msg']} us/msg;"
          f" {r['messages']:,} messages, {r['payload_bytes']}-byte payloads, fill {r['fill']})")
    rss = r["rss"]
    if rss.get("sampled"):
        print(f"replica {rss['node']} RSS: before {rss['rss_before_mib']} MiB, peak during"
              f" {rss['rss_peak_mib']} MiB, after {rss['rss_after_mib']} MiB (VmHWM"
              f" {rss['hwm_mib']} MiB; {rss['samples']} samples)")
    else:
        print(f"replica {rss['node']} RSS: not sampled (not a process of the local stack)")
    cpu = r["cpu"]
    print(f"CPU during the replay ({cpu['window_s']} s), microseconds per message (cores): "
          + ", ".join(f"{k.replace('_', ' ')} {cpu['us_per_msg'][k]} ({cpu['cores'][k]})"
                      for k in cpu["core_s"]))
    acks = r.get("acks") or {}
    if acks.get("compared"):
        print(f"replay rounds of {acks['messages']:,} messages each, acking by id and by range"
              " in turn (same stack, same run):")
        for name, key in (("acks by id (the baseline)", "by_id"), ("range acks", "range")):
            print(f"  {name:26}: msgs/s {acks[key]['msgs_per_s']}, machine us/msg"
                  f" {acks[key]['machine_us_per_msg']}")
        print(f"  range / by id: rate {acks['rate_ratio']}, machine CPU per message"
              f" {acks['machine_us_ratio']}")
    sec = r["security"]
    if sec.get("compared"):
        print(f"replay rounds of {sec['messages']:,} messages each, secure and insecure in"
              " turn:")
    for line in side_by_side(r, "msgs/s"):
        print(line)
    return bench_exit(args, r)


def _bench_catchup(args: argparse.Namespace) -> int:
    from tidemark.demo.catchup_bench import CatchupOptions, bench_catchup, render
    from tidemark.log.settings import default_state_dir
    state = Path(args.state_dir) if args.state_dir else default_state_dir()
    folder = Path(args.folder) if args.folder else state / "catchup"
    opts = CatchupOptions(rate=args.rate, senders=args.senders, window=args.window,
                          live_s=args.live, down_s=args.down, after_s=args.after,
                          dedup=args.dedup_dir == "on", handler_ms=args.handler_ms,
                          start_timeout_s=args.timeout)
    r = bench_catchup(settings_from_args(args), opts, folder, state_dir=args.state_dir,
                      say=progress)
    (folder / "summary.json").write_text(json.dumps(r, indent=2))
    if args.json:
        print_json(r)
    else:
        print(render(r))
    return bench_exit(args, r)


def register(commands: argparse._SubParsersAction[Any],
             bench: argparse._SubParsersAction[Any]) -> None:
    """Add ``demo``, ``bench replay`` and ``bench catchup``."""
    from tidemark.demo.replay_bench import HANDLERS
    demo = add_command(commands, "demo", _demo, "the replay scenario on a running local stack"
                                                " (brokers, replicas, Spark): kill -9 a peer,"
                                                " restart, replay, count lost messages")
    demo.add_argument("--rate", type=float, default=150.0, help="Ticks/s per sender")
    demo.add_argument("--live", type=float, default=10.0, help="seconds of traffic before"
                                                                 " the kill")
    demo.add_argument("--down", type=float, default=20.0, help="seconds B stays down")
    demo.add_argument("--after", type=float, default=10.0, help="seconds of traffic after"
                                                                 " B is back")
    demo.add_argument("--folder", default=None, help="ledgers and logs (default:"
                                                     " <state dir>/demo)")

    b = add_command(bench, "replay", _bench_replay, "a peer's backlog replayed into a Peer's"
                                                    " handler vs a raw consumer; replica RSS"
                                                    " during the replay")
    add_rounds_args(b, messages=1_000_000, rounds=False)
    b.add_argument("--fill", choices=("direct", "spark"), default="direct",
                   help="direct: the bench writes the queue records as the queues job"
                        " would (default); spark: the running queues job builds them")
    b.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                   help="entries per replay batch (the peer's replay option)")
    b.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                   help="the next batch is sent once at most this many are unacked")
    b.add_argument("--handler", choices=HANDLERS, default="batch",
                   help="batch: the messages go to a Peer.batch_handler (a list each call);"
                        " single: to a Peer.handler (one call each)")
    b.add_argument("--settle", type=float, default=300.0,
                   help="seconds to wait at most, after the fill, for a quiet machine (the"
                        " replicas ingested and compacted the backlog); 0: do not wait")
    b.add_argument("--timeout", type=float, default=900.0, help="seconds before the bench gives up")
    b.add_argument("--no-security-compare", dest="security_compare", action="store_false",
                   help="replay with mutual TLS only, not beside --insecure (no"
                        " security_ratio, no extra backlogs, no node restarts; quicker)")
    b.add_argument("--security-pairs", type=int, default=2, metavar="N",
                   help="secure and insecure replay rounds alternate N times each (default"
                        " 2); the replica nodes restart before each")
    b.add_argument("--security-messages", type=int, default=None, metavar="N",
                   help="the backlog of each security round and ack round (default: a"
                        " quarter of --messages)")
    b.add_argument("--ack-pairs", type=int, default=1, metavar="N",
                   help="replay rounds acking by id and by range alternate N times each"
                        " (default 1; 0: none), each on a backlog of its own")
    add_bench_check(b, targets.replay, ">= 100,000 msgs/s and ratio >= 0.5; security_ratio"
                                       " >= 0.9 when compared")

    c = add_command(bench, "catchup", _bench_catchup,
                    "a peer down for --down s under steady traffic, restarted with the traffic"
                    " going on: time to normal, peak held-back messages and bytes, the peer's"
                    " RSS, beside a raw consumer reading the same txlog stretch (needs"
                    " --replicas 2x2 --spark)")
    c.add_argument("--rate", type=float, default=1000.0,
                   help="Ticks/s sent to the peer, all senders together")
    c.add_argument("--senders", type=int, default=2,
                   help="sender processes sharing --rate")
    c.add_argument("--window", type=int, default=1000,
                   help="sends in flight per sender (each id counts once Kafka confirmed it)")
    c.add_argument("--live", type=float, default=5.0,
                   help="seconds of traffic with the peer up before the SIGKILL")
    c.add_argument("--down", type=float, default=60.0,
                   help="seconds the peer stays down while the traffic goes on")
    c.add_argument("--after", type=float, default=5.0,
                   help="seconds of traffic after the restarted peer reached normal, before"
                        " the senders stop")
    c.add_argument("--dedup-dir", choices=("on", "off"), default="off",
                   help="on: the peer keeps the persisted dedup store (a folder of the run);"
                        " off: the default peer settings (TIDEMARK_PEER_DEDUP_DIR ignored)")
    c.add_argument("--handler-ms", type=float, default=0.0,
                   help="each handler call sleeps this long (a slow consumer)")
    c.add_argument("--timeout", type=float, default=300.0,
                   help="seconds the peer may take to reach normal (either start); past it"
                        " after the restart the senders stop, the peer catches up without"
                        " traffic and the run misses its target")
    c.add_argument("--folder", default=None, help="ledgers, sent ids, logs and summary.json"
                                                  " (default: <state dir>/catchup)")
    add_bench_check(c, targets.catchup, "time to normal <= 15 s, held-back peak within its"
                                        " bound, nothing lost or applied twice")
