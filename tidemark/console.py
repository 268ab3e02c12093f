"""The ``tidemark`` console script: the one place that wires every component's commands.

Each module of :mod:`tidemark.commands` has ``register(commands, bench)``: ``commands`` is the
top-level subparsers object and ``bench`` the subparsers of ``tidemark bench``. A handler is
stored with ``set_defaults(func=...)`` and returns an exit code. Any :class:`TidemarkError`
becomes one readable line on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from types import ModuleType

from tidemark.log import registry
from tidemark.log.exceptions import TidemarkError
from tidemark.options import Parser, env_flag

__all__ = ["main", "build_parser"]

#: Command modules of :mod:`tidemark.commands`, in help order. They are imported when the
#: parser is built: the peer library alone (``pip install tidemark``) does not install what
#: the replica and queues commands import, and the command says so in one line.
COMMANDS = ("local", "txlog", "replica", "cluster", "queues", "deadletter", "peer", "ca", "demo")
#: What the extras install, by import name: a missing one is a missing extra, not a bug.
EXTRAS = {"plyvel": "replica", "pyspark": "spark", "pandas": "spark", "pyarrow": "spark"}


def _command_modules() -> list[ModuleType]:
    return [importlib.import_module(f"tidemark.commands.{name}") for name in COMMANDS]


def build_parser() -> argparse.ArgumentParser:
    """The full parser."""
    parser = Parser(prog="tidemark",
                    description="Kafka-backed durable transaction log with store replicas.")
    env_flag(parser, "--log-level", "log_level")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    bench_parser = commands.add_parser("bench", help="benchmarks, each beside a raw baseline")
    bench = bench_parser.add_subparsers(dest="bench", metavar="BENCH", parser_class=Parser)
    bench_parser.set_defaults(func=lambda args: _usage(bench_parser))
    for module in _command_modules():
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
    try:
        parser = build_parser()
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"tidemark: error: the tidemark command needs the {extra!r} extra ({exc.name} is"
              " not installed): pip install 'tidemark[all]'", file=sys.stderr)
        return 1
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
