"""``tidemark peer list | purge`` (the directory, Zebus's decommissioning), ``tidemark peer
token`` (a peer's credential) and ``tidemark bench send``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemark.bench import targets
from tidemark.options import (
    add_bench_check,
    add_command,
    add_group,
    add_json_flag,
    add_rounds_args,
    bench_exit,
    cluster_file,
    duration_ms,
    emit,
    env_flag,
    operator_transport,
    print_json,
    progress,
    replica_switch,
    run_rounds_bench,
    settings_from_args,
)

__all__ = ["register"]


def _depth_lookup(args: argparse.Namespace) -> Callable[[], dict[str, int]]:
    """Queue depth per peer from the queues topic (raises when it cannot be read)."""
    def lookup() -> dict[str, int]:
        from tidemark.spark_streaming.depth import depth_report
        return dict(depth_report(settings_from_args(args))["peers"])
    return lookup


def with_depths(rows: list[dict[str, Any]], lookup: Callable[[], dict[str, int]]
                ) -> str | None:
    """Set each row's ``queue_depth`` from ``lookup()`` (0: the peer has no queue entry).
    When the lookup raises (the queues topic cannot be read), every depth is None
    (unknown, not 0) and the reason is returned; else None."""
    from confluent_kafka import KafkaException

    from tidemark.log.exceptions import TidemarkError
    try:
        depths = lookup()
    except (TidemarkError, KafkaException) as exc:
        for row in rows:
            row["queue_depth"] = None
        detail = exc.args[0].str() if isinstance(exc, KafkaException) and exc.args \
            and hasattr(exc.args[0], "str") else str(exc)
        return " ".join(detail.split()) or type(exc).__name__
    for row in rows:
        row["queue_depth"] = depths.get(row["peer_id"], 0)
    return None


def list_lines(rows: list[dict[str, Any]]) -> list[str]:
    """``peer list``'s table; an unknown queue depth (None) shows as ``?``."""
    lines = [f"{'peer':<24} {'environment':<12} {'endpoint':<22} {'state':<5}"
             f" {'incarnation':<14} {'heartbeat':>9} {'queue':>7}"]
    for r in rows:
        depth = "?" if r["queue_depth"] is None else r["queue_depth"]
        lines.append(f"{r['peer_id']:<24} {r['environment']:<12} {r['endpoint'] or '-':<22} "
                     f"{'up' if r['up'] else 'DOWN':<5} {r['incarnation'][:14]:<14} "
                     f"{r['heartbeat_age_s']:>8}s {depth:>7}")
    return lines


def _list(args: argparse.Namespace) -> int:
    from tidemark.peer_client.operator import list_peers
    settings = settings_from_args(args)
    rows: list[dict[str, Any]] = list_peers(settings, args.environment,
                                            dead_after_ms=int(args.dead_after * 1000))
    why = with_depths(rows, _depth_lookup(args))
    if why is not None:
        shown = "null" if args.json else "?"
        print(f"tidemark: warning: queue depth unknown (shown as {shown}): cannot read"
              f" {settings.topic('queues')}: {why}", file=sys.stderr, flush=True)
    emit(args, rows, *list_lines(rows))
    return 0


def _status(args: argparse.Namespace) -> int:
    from tidemark.peer_client.operator import peer_status
    doc = peer_status(settings_from_args(args), args.peer_id, args.environment,
                      transport=operator_transport())
    if args.json:
        print_json(doc)
        return 0
    print(f"{doc['peer_id']} ({doc['environment']}): phase {doc['phase']}, incarnation"
          f" {doc['incarnation']}, endpoint {doc['endpoint']}, heartbeat"
          f" {doc['heartbeat_age_s']} s ago")
    replay = doc.get("replay")
    if replay:
        print(f"  replay: stage {replay['stage']}, replayed {replay['replayed']}"
              f" ({replay['duplicates_dropped']} duplicates dropped) in {replay['replay_ms']} ms,"
              f" forwarded during handover {replay['forwarded']} in {replay['handover_ms']} ms,"
              f" barrier {replay['barrier']}, retries {replay['retries']}")
        if replay.get("queue_progress") is not None and replay["stage"] == "waiting for queues":
            print(f"  waiting for the queues job: at txlog offset {replay['queue_progress']}"
                  f" of barrier {replay['barrier']}, for {replay.get('queue_wait_ms', 0)} ms")
        if replay["stage"] == "handover":
            print(f"  handover: txlog read to {replay.get('follower_position')} of"
                  f" {replay.get('handover_target')}")
    else:
        print("  replay: not configured for this peer")
    held = doc.get("held")
    if held:
        print(f"  held back: {held['messages']} message(s), {held['bytes']} bytes (peak"
              f" {held['peak_messages']}, {held['peak_bytes']} bytes; limit"
              f" {held['limit_messages']}, {held['limit_bytes']} bytes; refused"
              f" {held['refused']})")
    stats = doc.get("stats") or {}
    if stats:
        print("  " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
    return 0


def _purge(args: argparse.Namespace) -> int:
    from tidemark.gossip.record_signing import sealer_of
    from tidemark.peer_client.operator import purge_peer
    seal = sealer_of(operator_transport())  # signed as the operator (fails closed: no TLS)
    out = purge_peer(settings_from_args(args), args.peer_id, args.environment, seal=seal)
    if args.json:
        print_json(out)
    else:
        print(f"purged {out['peer_id']} ({out['environment']}): its Sends below txlog/"
              f"{out['partition']}@{out['below']} (Purge at purges/{out['partition']}@"
              f"{out['offset']}); its queue empties once the queues job has read it")
    return 0


def _token(args: argparse.Namespace) -> int:
    from tidemark.gossip.pki import write_private
    from tidemark.stack.replicas import peer_token
    token = peer_token(Path(cluster_file(args)), args.peer_id, args.environment, args.ttl)
    if args.write:  # 0600, an existing file tightened
        write_private(Path(args.write), (token + "\n").encode())
    emit(args, token_doc(args.peer_id, args.environment, token, args.write), token)
    return 0


def token_doc(peer: str, environment: str, token: str, file: str | None) -> dict[str, Any]:
    """``peer token --json``: whose token it is, the token, and the file it was written to
    (None without ``--write``)."""
    return {"peer": peer, "environment": environment, "token": token,
            "file": str(Path(file).resolve()) if file else None}


def _security_args(parser: argparse.ArgumentParser, pairs: bool = True) -> None:
    """``--no-security-compare`` (and ``--security-pairs``) of send, stable and replay."""
    parser.add_argument("--no-security-compare", dest="security_compare",
                        action="store_false",
                        help="measure the secure side (mutual TLS) only, not beside --insecure"
                             " (no security_ratio; quicker)")
    if pairs:
        parser.add_argument("--security-pairs", type=int, default=2, metavar="N",
                            help="secure and insecure rounds alternate N times each"
                                 " (default 2); bench stable without the comparison: N"
                                 " counted rounds, each beside a raw round")


def _print_security(result: dict[str, Any], unit: str) -> None:
    from tidemark.bench.security import side_by_side
    for line in side_by_side(result, unit):
        print(line)


def _bench_send(args: argparse.Namespace) -> int:
    from functools import partial

    from tidemark.bench.peer import bench_send
    result = run_rounds_bench(args, partial(bench_send,
                                            compare_insecure=args.security_compare))
    if args.json:
        print_json(result)
        return bench_exit(args, result)
    print(f"raw confluent-kafka producer      : {result['raw_msgs_per_s']:>10,} msg/s")
    print(f"Peer.post (durability log)        : {result['peer_msgs_per_s']:>10,} msg/s"
          f"  ratio {result['ratio']:.3f}")
    if "tracked_msgs_per_s" in result:
        print(f"Peer.send_nowait (durability log) : {result['tracked_msgs_per_s']:>10,} msg/s"
              f"  ratio {result['tracked_ratio']:.3f}")
    if "post_many_msgs_per_s" in result:
        print(f"raw producer, keys in runs        : {result['raw_runs_msgs_per_s']:>10,} msg/s")
        print(f"Peer.post_many (runs of one key)  : {result['post_many_msgs_per_s']:>10,} msg/s"
              f"  ratio {result['post_many_ratio']:.3f} (to the raw producer in runs)")
    verdict = "meets" if result["ratio"] >= result["target_ratio"] else "BELOW"
    print(f"({verdict} target >= {result['target_ratio']}; median of {result['rounds']} rounds)")
    _print_security(result, "msgs/s")
    return bench_exit(args, result)


def _bench_stable(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from tidemark.bench.peer import bench_stable
    from tidemark.stack.cpu_account import stack_pids
    pids = {"replicas": stack_pids(args.state_dir, "replica"),
            "brokers": stack_pids(args.state_dir, "broker")}
    with ExitStack() as stack:
        switch, reason = replica_switch(args, stack)
        result = bench_stable(settings_from_args(args), rate=args.rate, seconds=args.seconds,
                              warm_up_s=args.warm_up, progress=progress, switch=switch,
                              pairs=args.security_pairs, skip_reason=reason, pids=pids)
    if args.json:
        print_json(result)
        return bench_exit(args, result)
    verdict = "meets" if result["stable_p99_ms"] <= result["target_p99_ms"] else "ABOVE"
    print(f"send->stable at durability all, sent at {result['achieved_rate']:,} of"
          f" {result['target_rate']:,} msgs/s: p50 {result['stable_p50_ms']} ms,"
          f" p99 {result['stable_p99_ms']} ms ({verdict} target p99 <= "
          f"{result['target_p99_ms']} ms; {result['failed']} failed; all stable"
          f" {result['drain_s']} s after the last send)")
    print(f"raw producer acks=all, same rate     : p50 {result['raw_ack_p50_ms']} ms,"
          f" p99 {result['raw_ack_p99_ms']} ms (Kafka alone, a round beside each of the"
          f" {result['rounds']}; stable p99 / raw p99 = {result['ratio_p99']}, target <="
          f" {result['target_ratio_p99']})")
    for side, parts in result["cpu_us_per_msg"].items():
        print(f"CPU per message, {side:8}: " + ", ".join(
            f"{k} {'-' if v is None else v} us" for k, v in parts.items()))
    _print_security(result, "ms p99")
    return bench_exit(args, result)


def register(commands: argparse._SubParsersAction[Any],
             bench: argparse._SubParsersAction[Any]) -> None:
    """Add ``peer`` and ``bench send``."""
    sub = add_group(commands, "peer", "peers in the directory; decommissioning")
    ls = add_command(sub, "list", _list, "id, environment, endpoint, up/down, incarnation,"
                                         " last heartbeat, queue depth")
    ls.add_argument("--environment", default=None, help="only this environment (default: all)")
    ls.add_argument("--dead-after", type=float, default=10.0, metavar="SECONDS",
                    help="a peer whose last heartbeat is older counts as down (default 10)")
    purge = add_command(sub, "purge", _purge, "append a Purge: the peer's queue empties")
    status = add_command(sub, "status", _status, "a running peer's phase, incarnation, replayed"
                                                 " and forwarded counts, handover duration")
    for p in (purge, status):
        p.add_argument("peer_id", help="the peer id")
        env_flag(p, "--environment", "environment")
    token = sub.add_parser("token", help="print a peer's credential for replay and pins"
                                         " (signed with the cluster file's secret)")
    token.add_argument("peer_id", help="the peer the token is for")
    env_flag(token, "--environment", "environment")
    env_flag(token, "--config", "config", help="the cluster TOML (default: the local stack's)")
    env_flag(token, "--state-dir", "state_dir")
    token.add_argument("--ttl", default=None, metavar="DURATION", type=duration_ms,
                       help="expire after this long, e.g. 24h (default: no expiry)")
    token.add_argument("--write", default=None, metavar="FILE",
                       help="also write it to FILE (mode 600), for TIDEMARK_PEER_TOKEN_FILE")
    add_json_flag(token, help="print the peer, environment, token and file as JSON")
    token.set_defaults(func=_token)

    send = add_command(bench, "send", _bench_send,
                       "Peer.send (durability log) vs raw confluent-kafka")
    add_rounds_args(send)
    _security_args(send, pairs=False)
    add_bench_check(send, targets.send, "ratio >= 0.8; security_ratio >= 0.9 when compared")

    stable = add_command(bench, "stable", _bench_stable,
                         "send->stable latency at durability all (needs the replica nodes)")
    stable.add_argument("--rate", type=int, default=10_000, help="messages per second")
    stable.add_argument("--seconds", type=float, default=5.0, help="how long to send")
    stable.add_argument("--warm-up", type=float, default=10.0, metavar="SECONDS",
                        help="uncounted seconds at the same rate before each round")
    _security_args(stable)
    add_bench_check(stable, targets.stable,
                    "p99 <= 100 ms; security_ratio >= 0.9 when compared")
