"""``tidemark topics``, ``tidemark load`` and ``tidemark bench produce``: the log component."""

from __future__ import annotations

import argparse
from typing import Any

from tidemark.bench import targets
from tidemark.log.exceptions import ConfigError
from tidemark.options import (
    add_bench_check,
    add_command,
    add_group,
    add_rounds_args,
    bench_exit,
    emit,
    print_json,
    run_rounds_bench,
    settings_from_args,
)

__all__ = ["register"]


def _load(args: argparse.Namespace) -> int:
    from tidemark.log.load import generate_load, stderr_progress
    if args.peers < 1 or args.messages < 0:
        raise ConfigError("--peers must be >= 1 and --messages >= 0")
    if not 0.0 <= args.ack_ratio <= 1.0:
        raise ConfigError("--ack-ratio must be between 0 and 1")
    from tidemark.gossip.record_signing import load_sealers
    settings = settings_from_args(args)
    # acks signed as each recipient when this process may sign from the cluster's CA
    # folder (the local stack, TIDEMARK_TLS_ISSUER); else single-id Acks (insecure clusters)
    result = generate_load(settings, peers=args.peers, messages=args.messages,
                           ack_ratio=args.ack_ratio, payload_bytes=args.payload_bytes,
                           seed=args.seed, progress=stderr_progress("load"),
                           sealers=load_sealers(settings.environment,
                                                getattr(args, "state_dir", None)))
    if args.json:
        print_json(result.summary())
    else:
        rate = result.sent / result.seconds if result.seconds else 0.0
        print(f"sent {result.sent} messages to {len(result.peers)} peers, acked {result.acked}"
              f" ({rate:,.0f} sends/s)")
        print("txlog end offsets: " + " ".join(f"{p}:{o}" for p, o in result.end_offsets.items()))
    return 0


def _topics_create(args: argparse.Namespace) -> int:
    from tidemark.log.topics import check_replication, ensure_topics
    settings = settings_from_args(args)
    created = ensure_topics(settings, timeout_s=args.timeout)
    check_replication(settings, allow_under_replicated=args.allow_under_replicated)
    emit(args, topics_created_doc(settings, created),
         f"created: {', '.join(created) or 'nothing (all exist)'}")
    return 0


def topics_created_doc(settings: Any, created: list[str]) -> dict[str, Any]:
    """``topics create --json``: the cluster, the five topics (logical name: topic) and
    the ones this run created."""
    from tidemark.log.settings import TOPICS
    return {"bootstrap": settings.bootstrap,
            "topics": {name: settings.topic(name) for name in TOPICS},
            "created": list(created)}


def _topics_describe(args: argparse.Namespace) -> int:
    from tidemark.log.topics import describe_topics
    info = describe_topics(settings_from_args(args))
    if args.json:
        print_json(info)
        return 0
    for name, row in info.items():
        print(f"{name:<28} partitions {row['partitions']:<3} rf {row['replication_factor']} "
              f"min.isr {row['min.insync.replicas']} smallest isr {row['min_isr']} "
              f"{row['cleanup.policy']}")
    return 0


def _bench_produce(args: argparse.Namespace) -> int:
    from tidemark.bench.produce import bench_produce
    result = run_rounds_bench(args, bench_produce)
    if args.json:
        print_json(result)
    else:
        print(f"raw confluent-kafka producer : {result['raw_msgs_per_s']:>10,} msg/s")
        print(f"tidemark LogProducer         : {result['log_msgs_per_s']:>10,} msg/s")
        verdict = "meets" if result["ratio"] >= result["target_ratio"] else "BELOW"
        print(f"ratio                        : {result['ratio']:>10.3f}  ({verdict} target"
              f" >= {result['target_ratio']}; {result['messages']:,} msgs of"
              f" {result['record_bytes']} bytes, acks=all, RF=3, median of {result['rounds']})")
    return bench_exit(args, result)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``topics``, ``load`` and ``bench produce``."""
    tsub = add_group(commands, "topics", "create or describe the five topics on any cluster")
    create = add_command(tsub, "create", _topics_create,
                         "create missing topics with the durable defaults")
    create.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for the topics and their leaders")
    create.add_argument("--allow-under-replicated", action="store_true",
                        help="do not refuse when txlog has fewer in-sync replicas than its RF")
    add_command(tsub, "describe", _topics_describe, "partitions, replication and ISR per topic")

    load = add_command(commands, "load", _load, "write valid txlog traffic (sends and acks)")
    load.add_argument("--peers", type=int, default=100, help="recipients to spread the sends over")
    add_rounds_args(load, messages=100_000, rounds=False)
    load.add_argument("--ack-ratio", type=float, default=0.5, help="share of the sends acked (0-1)")
    load.add_argument("--seed", type=int, default=None, help="random seed (default: random)")

    produce = add_command(bench, "produce", _bench_produce,
                          "LogProducer vs raw confluent-kafka producer")
    add_rounds_args(produce)
    add_bench_check(produce, targets.produce, "ratio >= 0.8")
