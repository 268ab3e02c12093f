"""CLI of the queues job: ``tidemark queues run|depth`` and ``tidemark bench queues``."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemark.bench import targets
from tidemark.log.exceptions import ConfigError
from tidemark.log.registry import env_value
from tidemark.options import (
    add_bench_check,
    add_command,
    add_group,
    bench_exit,
    duration_ms,
    env_flag,
    settings_from_args,
)
from tidemark.spark_streaming.checkpoint import default_checkpoint
from tidemark.spark_streaming.exceptions import QueuesError

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    from tidemark.spark_streaming.job import JobOptions, run_job
    settings = settings_from_args(args)
    trigger_ms = args.trigger
    if trigger_ms <= 0:
        raise ConfigError("--trigger must be positive")
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started our JVM
    checkpoint = args.checkpoint or str(default_checkpoint(settings, args.state_dir))
    options = JobOptions(
        checkpoint=checkpoint, trigger=f"{trigger_ms} milliseconds",
        ack_ttl_ms=args.ack_ttl, dedup_window_ms=args.dedup_window,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        master=None if (under_submit and not args.master) else (args.master or "local[2]"),
        driver_memory=args.driver_memory, log_level=args.spark_log_level,
        fail_on_data_loss=not args.allow_data_loss, state_partitions=args.state_partitions,
        state_groups=args.state_groups, max_restarts=args.max_restarts,
        status_file=_status_file(args),
        state_dir=str(args.state_dir) if args.state_dir else None,
        metrics_port=args.metrics_port, metrics_host=str(env_value("metrics_host")))
    return run_job(settings, options,
                   ready=_touch(Path(args.ready_file)) if args.ready_file else None)


def _status_file(args: argparse.Namespace) -> str | None:
    """``--status-file``, else ``supervisor.json`` next to ``--ready-file``, else none."""
    from tidemark.spark_streaming.supervisor import STATUS_NAME
    if args.status_file:
        return str(args.status_file)
    if args.ready_file:
        return str(Path(args.ready_file).with_name(STATUS_NAME))
    return None


def _touch(path: Path) -> Callable[[Any], None]:
    """The ``ready`` callback of :func:`run_job`: create ``path`` (for the local stack)."""
    def ready(query: Any) -> None:  # noqa: ARG001 - the running StreamingQuery
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return ready


def _depth(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from tidemark.log.topics import require_topics
    from tidemark.spark_streaming.depth import depth_report, wait_for_progress
    settings = settings_from_args(args)
    require_topics(settings, ("txlog", "queues"))  # "unreachable" vs "missing", one line
    try:
        if args.wait:
            wait_for_progress(settings, args.wait)
        report = depth_report(settings, args.peer)
    except KafkaException as exc:  # a consumer error that outlived its retries
        raise QueuesError(f"cannot read {settings.topic('queues')} from {settings.bootstrap}:"
                          f" {exc.args[0].str() if exc.args else exc}") from None
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for peer, depth in report["peers"].items():
        print(f"{peer:<30} {depth:>10}")
    print(f"{'total':<30} {report['total']:>10}")
    print("progress (txlog partition: next offset): "
          + (" ".join(f"{p}:{o}" for p, o in report["progress"].items()) or "none yet"))
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.step:
        from tidemark.bench.queue_step import bench_queue_step, print_step_report
        step = bench_queue_step()
        print(json.dumps(step, indent=2)) if args.json else print_step_report(step)
        return 0
    from tidemark.bench.queues import bench_queues, print_report
    result = bench_queues(settings_from_args(args), transactions=args.transactions,
                          rate=args.rate, seconds=args.seconds, trigger_ms=args.trigger,
                          state_dir=args.state_dir, backlog=args.backlog)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    return bench_exit(args, result)


def _job_args(parser: argparse.ArgumentParser) -> None:
    env_flag(parser, "--checkpoint", "spark_checkpoint")
    parser.add_argument("--trigger", default=500, type=duration_ms,
                        help="micro-batch interval (default 500ms)")
    env_flag(parser, "--ack-ttl", "ack_ttl")
    env_flag(parser, "--dedup-window", "dedup_window")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=200_000,
                        help="txlog records per micro-batch at most (Spark maxOffsetsPerTrigger)")
    env_flag(parser, "--master", "spark_master")
    parser.add_argument("--driver-memory", default="1g", help="Spark driver memory")
    parser.add_argument("--state-partitions", type=int, default=None,
                        help="state store partitions (default: txlog partitions, at most the"
                             " local cores; fixed once the checkpoint exists)")
    parser.add_argument("--state-groups", type=int, default=None,
                        help="state groups, txlog partition %% groups (default: one per state"
                             " partition for a new local checkpoint; fixed once it exists)")
    parser.add_argument("--spark-log-level", default="ERROR", help="Spark's own log level")
    parser.add_argument("--allow-data-loss", action="store_true",
                        help="keep going when txlog records expired before the job read them")
    parser.add_argument("--ready-file", default=None, metavar="PATH",
                        help="create PATH once the streaming query runs (the local stack"
                             " waits for it)")
    env_flag(parser, "--max-restarts", "queues_max_restarts")
    env_flag(parser, "--metrics-port", "queues_metrics_port", metavar="PORT")
    parser.add_argument("--status-file", default=None, metavar="PATH",
                        help="JSON file with the supervisor's restart count and last error"
                             " (default: supervisor.json next to --ready-file, if given)")


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``queues run``, ``queues depth`` and ``bench queues``."""
    sub = add_group(commands, "queues", "the Spark job materializing per-peer queues")
    job = add_command(sub, "run", _run,
                      "run the streaming job (Spark local mode or spark-submit)", json=False)
    job.set_defaults(service=True)  # librdkafka's warnings in its log
    _job_args(job)
    depth = add_command(sub, "depth", _depth, "queue depth per peer, from the queues topic")
    depth.add_argument("--peer", default=None, help="only this peer")
    depth.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                       help="first wait until progress covers txlog's current end offsets")

    b = add_command(bench, "queues", _bench, "Spark job throughput and send->queue latency vs a"
                                             " plain consumer")
    b.add_argument("--transactions", type=int, default=100_000,
                   help="backlog size for the throughput phase")
    b.add_argument("--rate", type=int, default=2000, help="sends/s in the latency phase")
    b.add_argument("--seconds", type=float, default=20.0,
                   help="length of the latency phase")
    b.add_argument("--trigger", default=500, type=duration_ms,
                   help="micro-batch interval (500, 500ms, 1s)")
    b.add_argument("--backlog", type=int, default=0, metavar="N",
                   help="first queue N messages for one peer that never acks (a down peer),"
                        " then measure the others' send->queue latency (default 0)")
    b.add_argument("--step", action="store_true",
                   help="only the job's own step per message (no stack): single Acks against"
                        " signed AckBatches checked by the admission, side by side")
    add_bench_check(b, targets.queues, "send->queue p99 < 3 s")

