"""The ``tidemark`` console script: one parser, subcommands registered by each component.

Each component's ``cli.py`` has ``register(commands, bench)``: ``commands`` is the top-level
subparsers object and ``bench`` the subparsers of ``tidemark bench``. A handler is stored with
``set_defaults(func=...)`` and returns an exit code. Any :class:`TidemarkError` becomes one
readable line on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Sequence

from log.exceptions import TidemarkError

__all__ = ["main", "build_parser"]

#: Components that add subcommands, in help order.
COMPONENTS = ("log.cli", "replica.cli", "gossip.cli", "peer_client.cli", "spark_streaming.cli")


def build_parser() -> argparse.ArgumentParser:
    """The full parser (components that fail to import are left out)."""
    parser = argparse.ArgumentParser(
        prog="tidemark", description="Kafka-backed durable transaction log with store replicas.")
    parser.add_argument("--log-level", default=os.environ.get("TIDEMARK_LOG_LEVEL", "WARNING"),
                        help="logging level (env TIDEMARK_LOG_LEVEL; default WARNING)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench_parser = commands.add_parser("bench", help="benchmarks, each beside a raw baseline")
    bench = bench_parser.add_subparsers(dest="bench", metavar="BENCH")
    bench_parser.set_defaults(func=lambda args: (bench_parser.print_help(), 2)[1])
    for name in COMPONENTS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(commands, bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=str(args.log_level).upper(), stream=sys.stderr,
                        format='{"ts":"%(asctime)s","level":"%(levelname)s",'
                               '"logger":"%(name)s","msg":"%(message)s"}')
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("tidemark.librdkafka").setLevel(logging.CRITICAL)
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
