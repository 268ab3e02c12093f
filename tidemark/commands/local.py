"""``tidemark local up | status | down | kill | settle``: the local stack on loopback."""

from __future__ import annotations

import argparse

from tidemark.exceptions import StackError
from tidemark.options import (
    add_check_flag,
    add_group,
    add_json_flag,
    emit,
    env_flag,
    finish_check,
    print_json,
    progress,
)
from tidemark.stack import LocalStack, replica_plan, spark_plan
from tidemark.stack.settle import QUIET_CORES, wait_quiet
from tidemark.stack.spark import metrics_address as spark_metrics_address

__all__ = ["register"]


def _stack(args: argparse.Namespace) -> LocalStack:
    return LocalStack(args.state_dir)


def _plans(args: argparse.Namespace) -> list:
    plans = []
    if args.replicas:
        layout = args.replicas
        plans.append(lambda stack: replica_plan(stack, layout))
    if args.spark:
        plans.append(spark_plan)
    if args.prometheus or _stack(args).processes("prometheus"):
        from tidemark.stack.prometheus import plan as prometheus_plan
        plans.append(prometheus_plan)  # last: it scrapes what the others started
    return plans


def _local_up(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise StackError("--brokers must be at least 1")
    stack = _stack(args)
    status = _with_prometheus(stack, stack.up(brokers=args.brokers, extra=_plans(args),
                                              timeout_s=args.timeout, progress=progress,
                                              sasl=args.sasl))
    if args.json:
        print_json(status)
    else:
        protocol = status["security_protocol"]
        sasl = "" if protocol == "PLAINTEXT" else f" ({protocol})"
        print(f"bootstrap: {status['bootstrap']}{sasl}")
        if status["prometheus"]:
            print(f"prometheus: {status['prometheus']['url']}")
    return 0


def _with_prometheus(stack: LocalStack, status: dict) -> dict:
    """The stack's status with its Prometheus (``prometheus``: None when it has none)."""
    from tidemark.stack.prometheus import status as prometheus_status
    return {**status, "prometheus": prometheus_status(stack)}


def _local_status(args: argparse.Namespace) -> int:
    stack = _stack(args)
    status = _with_prometheus(stack, stack.status())
    if status["spark"]:
        status["spark"]["metrics"] = spark_metrics_address(stack)  # host:port of /metrics
    if args.json:
        print_json(status)
        return 0
    print(f"state dir: {status['state_dir']}")
    print(f"bootstrap: {status['bootstrap'] or '(not started)'}")
    rows = [(f"broker-{b['id']}", b) for b in status["brokers"]]
    rows += [(r["id"], r) for r in status["replicas"]]
    if status["spark"]:
        rows.append(("spark", {**status["spark"], "address": "-"}))
    if status["prometheus"]:
        rows.append(("prometheus", status["prometheus"]))
    for name, row in rows:
        restarts = f" (query restarted {row['restarts']}x)" if row.get("restarts") else ""
        print(f"  {name:<10} {row['address'] or '-':<22} pid {row['pid'] or '-':<8} "
              f"{'up' if row['up'] else 'DOWN'}{restarts}")
    return 0


def _local_down(args: argparse.Namespace) -> int:
    stopped = _stack(args).down(grace_s=args.grace)
    emit(args, {"stopped": stopped}, f"stopped: {', '.join(stopped) or 'nothing'}")
    return 0


def _local_kill(args: argparse.Namespace) -> int:
    pid = _stack(args).kill(args.name)
    emit(args, {"name": args.name, "pid": pid},
         f"killed {args.name} (pid {pid}) with SIGKILL")
    return 0


def _local_settle(args: argparse.Namespace) -> int:
    settled = wait_quiet(args.cores, args.timeout, progress=progress)
    emit(args, settled.as_json(args.cores), f"machine {settled.describe(args.cores)}")
    return finish_check(args, "local settle", settled.misses(args.cores))


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``local``."""
    sub = add_group(commands, "local",
                    "the local stack on loopback (Kafka, replicas, Spark, Prometheus)")
    up = sub.add_parser("up", help="start what is missing; create the topics")
    env_flag(up, "--brokers", "brokers")
    env_flag(up, "--replicas", "replicas")
    up.add_argument("--spark", action="store_true", help="also run the Spark queues job")
    up.add_argument("--prometheus", action="store_true",
                    help="also run Prometheus (Debian's binary) scraping the nodes and the job,"
                         " with the alert rules; its address: `local status`")
    up.add_argument("--sasl", action="store_true",
                    help="new brokers listen with SASL_PLAINTEXT SCRAM-SHA-256 only; the client"
                         " settings go to the state folder, where every command takes them")
    up.add_argument("--timeout", type=float, default=180.0,
                    help="seconds to wait for every process to be up")
    add_json_flag(up, help="print the stack's state as JSON")
    up.set_defaults(func=_local_up)
    status = sub.add_parser("status", help="each process, its address, pid and liveness")
    add_json_flag(status)
    status.set_defaults(func=_local_status)
    down = sub.add_parser("down", help="stop everything the stack started")
    down.add_argument("--grace", type=float, default=20.0, help="seconds before SIGKILL")
    add_json_flag(down, help='print {"stopped": [names]} as JSON instead of text')
    down.set_defaults(func=_local_down)
    kill = sub.add_parser("kill", help="SIGKILL one process (broker-1, p0r1, spark)")
    kill.add_argument("name", help="the process to kill (broker-1, p0r0, queues-job...)")
    add_json_flag(kill, help='print {"name": ..., "pid": ...} as JSON instead of text')
    kill.set_defaults(func=_local_kill)
    settle = sub.add_parser("settle", help="wait until the machine is quiet (before a"
                                           " measurement); prints how busy it was")
    settle.add_argument("--cores", type=float, default=QUIET_CORES,
                        help=f"quiet means fewer cores busy than this (default {QUIET_CORES})")
    settle.add_argument("--timeout", type=float, default=120.0,
                        help="give up after this many seconds (exit 0, says NOT quiet;"
                             " exit 3 with --check)")
    add_check_flag(settle, "the machine is not quiet by --timeout (one line on stderr says so)")
    add_json_flag(settle, help="print the figures and whether the machine was quiet as JSON")
    settle.set_defaults(func=_local_settle)
    for p in (up, status, down, kill, settle):
        env_flag(p, "--state-dir", "state_dir")
