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
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from tidemark import logs
from tidemark.log import registry
from tidemark.log.exceptions import TidemarkError
from tidemark.options import Parser, env_flag

__all__ = ["main", "build_parser"]

#: Command modules of :mod:`tidemark.commands`, in help order. They are imported when the
#: parser is built: the peer library alone (``pip install tidemark``) does not install what
#: the replica and queues commands import, and the command says so in one line.
COMMANDS = ("local", "txlog", "logtail", "replica", "cluster", "queues", "deadletter", "peer",
            "ca", "demo")
#: What the extras install, by import name: a missing one is a missing extra, not a bug.
EXTRAS = {"plyvel": "replica", "pyspark": "spark", "pandas": "spark", "pyarrow": "spark"}


def _command_modules() -> list[ModuleType]:
    return [importlib.import_module(f"tidemark.commands.{name}") for name in COMMANDS]


def build_parser() -> argparse.ArgumentParser:
    """The full parser."""
    parser = Parser(prog="tidemark",
                    description="Kafka-backed durable transaction log with store replicas.")
    env_flag(parser, "--log-level", "log_level")
    parser.add_argument("--version", action="version", version=f"tidemark {_version()}",
                        help="print the installed version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    bench_parser = commands.add_parser("bench", help="benchmarks, each beside a raw baseline")
    bench = bench_parser.add_subparsers(dest="bench", metavar="BENCH", parser_class=Parser)
    bench_parser.set_defaults(func=lambda args: _usage(bench_parser))
    for module in _command_modules():
        module.register(commands, bench)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("tidemark")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _global_flags_first(argv: Sequence[str]) -> list[str]:
    """``--log-level`` is accepted anywhere: moved before the command."""
    rest, front = list(argv), []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--log-level" and i + 1 < len(rest):
            front += rest[i:i + 2]
            del rest[i:i + 2]
        elif arg.startswith("--log-level="):
            front.append(rest.pop(i))
        elif arg == "--":
            break
        else:
            i += 1
    return front + rest


def unexpected(exc: BaseException) -> str:
    """One line for an error no component turned into a TidemarkError (a Kafka, gRPC or
    LevelDB error that escaped): its kind and text, without the traceback."""
    detail = str(exc)
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "str"):  # confluent_kafka.KafkaException(KafkaError)
        detail = args[0].str()
    elif hasattr(exc, "details") and callable(exc.details):  # grpc.RpcError
        detail = f"{exc.code().name}: {exc.details()}"  # type: ignore[attr-defined]
    detail = " ".join(detail.split()) or "(no message)"
    return (f"tidemark: error: {type(exc).__name__}: {detail} (--log-level DEBUG shows the"
            " traceback)")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


@contextmanager
def _state_dir_for_all(args: argparse.Namespace) -> Iterator[None]:
    """``--state-dir`` stands for ``TIDEMARK_STATE_DIR`` in everything the command does while
    it runs: what reads settings, where a peer or a node finds the local stack's CA, and the
    processes it starts."""
    folder = getattr(args, "state_dir", None)
    if not folder:
        yield
        return
    env = registry.setting("state_dir").env
    saved = os.environ.get(env)
    os.environ[env] = str(Path(folder).resolve())
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = saved


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
    args = parser.parse_args(_global_flags_first(sys.argv[1:] if argv is None else argv))
    try:
        registry.check_environment()
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 2
    logs.configure(args.log_level, service=bool(getattr(args, "service", False)))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with _state_dir_for_all(args):
            return int(args.func(args) or 0)
    except TidemarkError as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tidemark: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        if logging.getLogger().level <= logging.DEBUG:
            raise
        print(unexpected(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
