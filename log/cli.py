"""CLI of the log component: ``tidemark local``, ``tidemark load``, ``tidemark bench produce``."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Callable

from log.exceptions import ConfigError
from log.settings import default_state_dir, load_settings

__all__ = ["register"]


def _env(name: str, default: Any = None) -> Any:
    return os.environ.get(name, default)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def _progress(msg: str) -> None:
    print(f"tidemark: {msg}", file=sys.stderr, flush=True)


def add_settings_args(parser: argparse.ArgumentParser) -> None:
    """--config / --bootstrap / --topic-prefix, falling back to TIDEMARK_* variables."""
    parser.add_argument("--config", default=_env("TIDEMARK_CONFIG"),
                        help="TOML config file (env TIDEMARK_CONFIG)")
    parser.add_argument("--bootstrap", default=None,
                        help="Kafka bootstrap servers (env TIDEMARK_BOOTSTRAP; default: the local stack)")
    parser.add_argument("--topic-prefix", default=None, help="topic prefix (env TIDEMARK_TOPIC_PREFIX)")
    parser.add_argument("--state-dir", default=None,
                        help="local stack state folder (env TIDEMARK_STATE_DIR, default ./.tidemark)")


def settings_from_args(args: argparse.Namespace):  # -> Settings
    """Settings from the shared flags (flags win over environment over the TOML file)."""
    return load_settings(args.config, state_dir=getattr(args, "state_dir", None),
                         bootstrap=args.bootstrap, topic_prefix=args.topic_prefix)


def _stack(args: argparse.Namespace):
    from log.local_cluster import LocalStack
    return LocalStack(args.state_dir or default_state_dir())


def _plans(args: argparse.Namespace) -> list[Callable]:
    plans: list[Callable] = []
    if args.replicas:
        try:
            layout = args.replicas
            module = importlib.import_module("replica.local")
        except ModuleNotFoundError:
            raise ConfigError("replica nodes are not available in this build") from None
        plans.append(lambda stack: module.plan(stack, layout))
    if args.spark:
        try:
            module_s = importlib.import_module("spark_streaming.local")
        except ModuleNotFoundError:
            raise ConfigError("the Spark job is not available in this build") from None
        plans.append(module_s.plan)
    return plans


def _local_up(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise ConfigError("--brokers must be at least 1")
    status = _stack(args).up(brokers=args.brokers, extra=_plans(args),
                             timeout_s=args.timeout, progress=_progress)
    if args.json:
        _print_json(status)
    else:
        print(f"bootstrap: {status['bootstrap']}")
    return 0


def _local_status(args: argparse.Namespace) -> int:
    status = _stack(args).status()
    if args.json:
        _print_json(status)
        return 0
    print(f"state dir: {status['state_dir']}")
    print(f"bootstrap: {status['bootstrap'] or '(not started)'}")
    rows = [(f"broker-{b['id']}", b) for b in status["brokers"]]
    rows += [(r["id"], r) for r in status["replicas"]]
    if status["spark"]:
        rows.append(("spark", {**status["spark"], "address": "-"}))
    for name, row in rows:
        print(f"  {name:<10} {row['address'] or '-':<22} pid {row['pid'] or '-':<8} "
              f"{'up' if row['up'] else 'DOWN'}")
    return 0


def _local_down(args: argparse.Namespace) -> int:
    stopped = _stack(args).down(grace_s=args.grace)
    print(f"stopped: {', '.join(stopped) or 'nothing'}")
    return 0


def _local_kill(args: argparse.Namespace) -> int:
    pid = _stack(args).kill(args.name)
    print(f"killed {args.name} (pid {pid}) with SIGKILL")
    return 0


def _load(args: argparse.Namespace) -> int:
    from log.load import generate_load, stderr_progress
    if args.peers < 1 or args.messages < 0:
        raise ConfigError("--peers must be >= 1 and --messages >= 0")
    if not 0.0 <= args.ack_ratio <= 1.0:
        raise ConfigError("--ack-ratio must be between 0 and 1")
    result = generate_load(settings_from_args(args), peers=args.peers, messages=args.messages,
                           ack_ratio=args.ack_ratio, payload_bytes=args.payload_bytes,
                           seed=args.seed, progress=stderr_progress("load"))
    if args.json:
        _print_json(result.summary())
    else:
        rate = result.sent / result.seconds if result.seconds else 0.0
        print(f"sent {result.sent} messages to {len(result.peers)} peers, acked {result.acked}"
              f" ({rate:,.0f} sends/s)")
        print("txlog end offsets: " + " ".join(f"{p}:{o}" for p, o in result.end_offsets.items()))
    return 0


def _topics_create(args: argparse.Namespace) -> int:
    from log.topics import check_replication, ensure_topics
    settings = settings_from_args(args)
    created = ensure_topics(settings, timeout_s=args.timeout)
    check_replication(settings, allow_under_replicated=args.allow_under_replicated)
    print(f"created: {', '.join(created) or 'nothing (all exist)'}")
    return 0


def _topics_describe(args: argparse.Namespace) -> int:
    from log.topics import describe_topics
    info = describe_topics(settings_from_args(args))
    if args.json:
        _print_json(info)
        return 0
    for name, row in info.items():
        print(f"{name:<28} partitions {row['partitions']:<3} rf {row['replication_factor']} "
              f"min.isr {row['min.insync.replicas']} smallest isr {row['min_isr']} "
              f"{row['cleanup.policy']}")
    return 0


def _bench_produce(args: argparse.Namespace) -> int:
    from log.bench_produce import bench_produce
    result = bench_produce(settings_from_args(args), messages=args.messages,
                           payload_bytes=args.payload_bytes, rounds=args.rounds,
                           progress=_progress)
    if args.json:
        _print_json(result)
    else:
        print(f"raw confluent-kafka producer : {result['raw_msgs_per_s']:>10,} msg/s")
        print(f"tidemark LogProducer         : {result['log_msgs_per_s']:>10,} msg/s")
        verdict = "meets" if result["ratio"] >= result["target_ratio"] else "BELOW"
        print(f"ratio                        : {result['ratio']:>10.3f}  ({verdict} target"
              f" >= {result['target_ratio']}; {result['messages']:,} msgs of"
              f" {result['record_bytes']} bytes, acks=all, RF=3, median of {result['rounds']})")
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``local``, ``load`` and ``bench produce``."""
    local = commands.add_parser("local", help="the local stack on loopback (Kafka, replicas, Spark)")
    sub = local.add_subparsers(dest="local_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start what is missing; create the topics")
    up.add_argument("--brokers", type=int, default=int(_env("TIDEMARK_BROKERS", 3)))
    up.add_argument("--replicas", default=_env("TIDEMARK_REPLICAS"),
                    help="replica layout PxR, e.g. 2x2 for p0r0 p0r1 p1r0 p1r1")
    up.add_argument("--spark", action="store_true", help="also run the Spark queues job")
    up.add_argument("--timeout", type=float, default=180.0)
    up.add_argument("--json", action="store_true")
    up.set_defaults(func=_local_up)
    status = sub.add_parser("status", help="each process, its address, pid and liveness")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_local_status)
    down = sub.add_parser("down", help="stop everything the stack started")
    down.add_argument("--grace", type=float, default=20.0, help="seconds before SIGKILL")
    down.set_defaults(func=_local_down)
    kill = sub.add_parser("kill", help="SIGKILL one process (broker-1, p0r1, spark)")
    kill.add_argument("name")
    kill.set_defaults(func=_local_kill)
    for p in (up, status, down, kill):
        p.add_argument("--state-dir", default=None,
                       help="state folder (env TIDEMARK_STATE_DIR, default ./.tidemark)")

    topics = commands.add_parser("topics", help="create or describe the five topics on any cluster")
    tsub = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    create = tsub.add_parser("create", help="create missing topics with the durable defaults")
    create.add_argument("--timeout", type=float, default=120.0)
    create.add_argument("--allow-under-replicated", action="store_true",
                        help="do not refuse when txlog has fewer in-sync replicas than its RF")
    create.set_defaults(func=_topics_create)
    describe = tsub.add_parser("describe", help="partitions, replication and ISR per topic")
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(func=_topics_describe)
    for p in (create, describe):
        add_settings_args(p)

    load = commands.add_parser("load", help="write valid txlog traffic (sends and acks)")
    add_settings_args(load)
    load.add_argument("--peers", type=int, default=100)
    load.add_argument("--messages", type=int, default=100_000)
    load.add_argument("--ack-ratio", type=float, default=0.5)
    load.add_argument("--payload-bytes", type=int, default=150)
    load.add_argument("--seed", type=int, default=None)
    load.add_argument("--json", action="store_true")
    load.set_defaults(func=_load)

    produce = bench.add_parser("produce", help="LogProducer vs raw confluent-kafka producer")
    add_settings_args(produce)
    produce.add_argument("--messages", type=int, default=200_000)
    produce.add_argument("--payload-bytes", type=int, default=150)
    produce.add_argument("--rounds", type=int, default=3)
    produce.add_argument("--json", action="store_true")
    produce.set_defaults(func=_bench_produce)
