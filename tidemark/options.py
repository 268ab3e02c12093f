"""Shared CLI plumbing: flags whose fallback is a declared setting, and settings from flags.

:class:`EnvDefault` is bytewax's ``_EnvDefault`` pattern: a flag declared with
``setting="name"`` takes its default from that setting's environment variable at parse time,
and its help names the variable. A bad value (flag or variable) becomes one
``tidemark: error:`` line, through :class:`Parser.error`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from tidemark.log import registry
from tidemark.log.exceptions import ConfigError
from tidemark.log.settings import Settings, load_settings

__all__ = ["Parser", "EnvDefault", "env_flag", "add_settings_args", "settings_from_args",
           "add_group", "add_command", "add_rounds_args", "run_rounds_bench", "duration_ms",
           "cluster_file", "print_json", "progress", "replica_switch", "add_json_flag",
           "emit", "EXIT_MISSED", "add_check_flag", "check_exit", "finish_check",
           "add_bench_check", "bench_exit"]

#: The exit code of a run that finished but missed what ``--check`` asked of it (a bench
#: below its printed target, a machine not quiet by ``local settle``'s deadline). 1 stays
#: an error (the command could not do its work), 2 a usage error.
EXIT_MISSED = 3


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one ``tidemark: error:`` line, exit 2."""

    def error(self, message: str) -> NoReturn:
        where = "" if self.prog == "tidemark" else f"{self.prog}: "
        print(f"tidemark: error: {where}{message}", file=sys.stderr)
        sys.exit(2)


def _converter(spec: registry.Setting) -> Any:
    """argparse ``type`` for ``spec``: a plain function (argparse reprs it in errors)."""
    def convert(text: str) -> Any:
        try:
            return spec.parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = spec.kind
    return convert


class EnvDefault(argparse.Action):
    """A flag whose default is its registry setting's environment variable, else its default.

    The variable's text is the flag's string default, so argparse converts it with the
    setting's parser at parse time, only for the subcommand that is run.
    """

    def __init__(self, option_strings: list[str], dest: str, setting: str,
                 default: Any = None, help: str | None = None, **kwargs: Any) -> None:
        self.spec = registry.setting(setting)
        env_text = os.environ.get(self.spec.env)
        if default is None:
            default = self.spec.default
        shown = default
        if env_text:
            default = env_text
        kwargs.setdefault("type", _converter(self.spec))
        suffix = f"; default {shown}" if shown not in (None, "") else ""
        super().__init__(option_strings, dest, default=default,
                         help=f"{help or self.spec.help} (env {self.spec.env}{suffix})", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)


def env_flag(parser: argparse.ArgumentParser, flag: str, setting: str,
             aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
    """Add ``flag`` (and its ``aliases``) backed by registry ``setting`` (its env variable
    and default)."""
    parser.add_argument(flag, *aliases, action=EnvDefault, setting=setting, **kwargs)


def _client_pair(text: str) -> tuple[str, str]:
    """An argparse ``type``: ``key=value`` of ``-X`` (a librdkafka client setting)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value (a librdkafka setting such as"
                                         f" security.protocol=SASL_SSL), got {text!r}")
    return key.strip(), value


def add_settings_args(parser: argparse.ArgumentParser) -> None:
    """--config / --bootstrap (--bootstrap-server) / --topic-prefix / --state-dir, each
    backed by its variable, and ``-X key=value`` (kcat's and kafka-console-*'s spelling)."""
    env_flag(parser, "--config", "config")
    env_flag(parser, "--bootstrap", "bootstrap", aliases=("--bootstrap-server",),
             help="Kafka bootstrap servers (default: the local stack's)")
    env_flag(parser, "--topic-prefix", "topic_prefix")
    env_flag(parser, "--state-dir", "state_dir")
    parser.add_argument("-X", dest="client_settings", metavar="KEY=VALUE", action="append",
                        type=_client_pair, default=None,
                        help="a librdkafka client setting, as kcat's -X; repeatable; wins"
                             " over [kafka.client] and TIDEMARK_KAFKA_* (checked up front)")


def add_group(commands: argparse._SubParsersAction[Any], name: str,
              help: str) -> argparse._SubParsersAction[Any]:
    """A command ``name`` whose ACTION (``args.<name>_command``) is required; its
    subparsers, for :func:`add_command`."""
    group = commands.add_parser(name, help=help)
    return group.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)


def add_command(sub: argparse._SubParsersAction[Any], name: str,
                func: Callable[[argparse.Namespace], int], help: str,
                json: bool = True) -> argparse.ArgumentParser:
    """A subcommand ``name`` of ``sub`` that runs ``func``, with the settings flags
    (:func:`add_settings_args`) and, unless ``json`` is off, ``--json``."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help)
    add_settings_args(parser)
    if json:
        add_json_flag(parser)
    parser.set_defaults(func=func)
    return parser


def add_json_flag(parser: argparse.ArgumentParser,
                  help: str = "print JSON instead of text") -> None:
    """``--json``: the command prints one JSON object on stdout (see :func:`emit`) instead of
    its text lines."""
    parser.add_argument("--json", action="store_true", help=help)


def emit(args: argparse.Namespace, doc: Any, *lines: str) -> None:
    """A command's output: with ``--json``, ``doc`` as one JSON object on stdout; else its
    text ``lines``, each printed as it is."""
    if getattr(args, "json", False):
        print_json(doc)
    else:
        for line in lines:
            print(line)


def add_check_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """``--check``: exit :data:`EXIT_MISSED` when the run misses what ``help`` says (see
    :func:`finish_check`); without it the exit code does not depend on the outcome."""
    parser.add_argument("--check", action="store_true",
                        help=f"exit {EXIT_MISSED} (after printing the figures) if {help}")


def check_exit(misses: Sequence[str], check: bool) -> int:
    """The exit code of a run that finished: :data:`EXIT_MISSED` when ``--check`` was given
    and the run missed something (``misses``: what, one phrase each), else 0."""
    return EXIT_MISSED if check and misses else 0


def finish_check(args: argparse.Namespace, what: str, misses: Sequence[str]) -> int:
    """:func:`check_exit` for ``args.check``; a miss under ``--check`` is also one line on
    stderr naming ``what`` missed and why."""
    code = check_exit(misses, bool(getattr(args, "check", False)))
    if code:
        print(f"tidemark: {what}: {'; '.join(misses)} (--check: exit {code})",
              file=sys.stderr, flush=True)
    return code


def add_bench_check(parser: argparse.ArgumentParser,
                    misses: Callable[[dict[str, Any]], list[str]], targets: str) -> None:
    """``--check`` of a bench: ``misses`` (a function of :mod:`tidemark.bench.targets`)
    tells from the bench's result which of its printed ``targets`` it missed;
    :func:`bench_exit` turns that into the exit code."""
    add_check_flag(parser, f"the result misses its target ({targets})")
    parser.set_defaults(bench_misses=misses)


def bench_exit(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """The exit code of a bench that printed ``result``: 0, or :data:`EXIT_MISSED` with
    ``--check`` when it missed a target (:func:`add_bench_check`)."""
    misses = getattr(args, "bench_misses", None)
    return finish_check(args, f"bench {getattr(args, 'bench', '')} missed its target",
                        misses(result) if misses else [])


def add_rounds_args(parser: argparse.ArgumentParser, messages: int = 200_000,
                    rounds: bool = True) -> None:
    """``--messages`` and ``--payload-bytes`` of a throughput bench (and ``--rounds``, the
    rounds whose median it reports); :func:`run_rounds_bench` runs it."""
    parser.add_argument("--messages", type=int, default=messages, help="messages to send")
    parser.add_argument("--payload-bytes", type=int, default=150, help="payload bytes per message")
    if rounds:
        parser.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported")


def run_rounds_bench(args: argparse.Namespace,
                     bench: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """``bench`` (``bench produce``, ``bench send``) on the flags' cluster with the
    :func:`add_rounds_args` flags, progress on stderr and the brokers' JIT probe."""
    from tidemark.stack.settle import broker_jit_probe
    settings = settings_from_args(args)
    return bench(settings, messages=args.messages, payload_bytes=args.payload_bytes,
                 rounds=args.rounds, progress=progress,
                 jit=broker_jit_probe(settings.bootstrap, args.state_dir))


def duration_ms(text: str) -> int:
    """An argparse ``type``: a duration such as ``500ms`` or ``24h``, in milliseconds."""
    try:
        return registry.parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the shared flags (flags win over environment over the TOML file)."""
    return load_settings(getattr(args, "config", None), state_dir=getattr(args, "state_dir", None),
                         client_extra=dict(getattr(args, "client_settings", None) or ()),
                         bootstrap=getattr(args, "bootstrap", None) or None,
                         topic_prefix=getattr(args, "topic_prefix", None))


def cluster_file(args: argparse.Namespace) -> str:
    """The cluster TOML: ``--config`` (or ``TIDEMARK_CONFIG``), else the local stack's."""
    if getattr(args, "config", None):
        return str(args.config)
    state = getattr(args, "state_dir", None) or registry.env_value("state_dir")
    return str(Path(state).resolve() / "cluster.toml")


def print_json(obj: Any) -> None:
    """Indented JSON on stdout."""
    print(json.dumps(obj, indent=2))


def progress(msg: str) -> None:
    """A progress line on stderr."""
    print(f"tidemark: {msg}", file=sys.stderr, flush=True)


def replica_switch(args: argparse.Namespace, exits: Any
                   ) -> tuple[Callable[[bool], float] | None, str]:
    """For a bench's security comparison (``--no-security-compare`` unless given): a
    function switching the local stack's replica nodes to plaintext (True) or TLS (False),
    entered on ``exits`` (an ``ExitStack``: the nodes are back on TLS when it closes), or
    None and why not."""
    if not getattr(args, "security_compare", False):
        return None, "--no-security-compare"
    from tidemark.log.exceptions import TidemarkError
    from tidemark.stack.launcher import LocalStack
    from tidemark.stack.replicas import ReplicaModes
    try:
        modes = exits.enter_context(ReplicaModes(LocalStack(args.state_dir)))
    except TidemarkError as exc:
        return None, f"cannot restart the replica nodes: {exc}"
    return modes.set, ""



def operator_transport() -> Any:
    """The command line's side of mutual TLS (a :class:`~tidemark.gossip.tls.Transport`): its
    operator certificate from ``TIDEMARK_TLS_*``, else one issued from the local CA; plaintext
    only with ``TIDEMARK_INSECURE=1``."""
    from tidemark.gossip.tls import default_transport
    return default_transport()
