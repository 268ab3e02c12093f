"""The ``tidemark`` console script: the one place that wires every component's commands.

Each module of :mod:`tidemark.commands` has ``register(commands, bench)``: ``commands`` is the
top-level subparsers object and ``bench`` the subparsers of ``tidemark bench``. A handler is
stored with ``set_defaults(func=...)`` and returns an exit code. Any :class:`TidemarkError`
becomes one readable line on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from log import registry
from log.exceptions import TidemarkError
from tidemark.commands import cluster, deadletter, demo, local, peer, queues, replica, txlog
from tidemark.options import Parser, env_flag

__all__ = ["main", "build_parser"]

#: Command modules, in help order.
COMMANDS = (local, txlog, replica, cluster, queues, deadletter, peer, demo)


def build_parser() -> argparse.ArgumentParser:
    """The full parser."""
    parser = Parser(prog="tidemark",
                    description="Kafka-backed durable transaction log with store replicas.")
    env_flag(parser, "--log-level", "log_level")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    bench_parser = commands.add_parser("bench", help="benchmarks, each beside a raw baseline")
    bench = bench_parser.add_subparsers(dest="bench", metavar="BENCH", parser_class=Parser)
    bench_parser.set_defaults(func=lambda args: _usage(bench_parser))
    for module in COMMANDS:
        module.register(commands, bench)
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format='{"ts":"%(asctime)s","level":"%(levelname)s",'
                               '"logger":"%(name)s","msg":"%(message)s"}')
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("tidemark.librdkafka").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        registry.check_environment()
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 2
    _configure_logging(args.log_level)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tidemark: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
