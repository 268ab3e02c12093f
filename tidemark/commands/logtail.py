"""``tidemark log tail``: any Tidemark topic read as a person or a script would with kcat,
its Avro single-object encoded records decoded (see :mod:`tidemark.log.tail`)."""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import KafkaException

from tidemark.log.exceptions import ConfigError, LogError
from tidemark.log.settings import TOPICS
from tidemark.options import add_command, add_group, add_json_flag, settings_from_args

__all__ = ["register"]


def _line(rec: dict[str, object]) -> str:
    where = f"{rec['topic']}/{rec['partition']}@{rec['offset']}"
    head = f"{rec['time'] or '-'} {where} key={rec['key'] or '-'}"
    if "schema" in rec:
        return f"{head} {rec['schema']} {json.dumps(rec['record'], separators=(',', ':'))}"
    if "error" in rec:
        return f"{head} UNDECODABLE ({rec['error']}) head={rec['head']}"
    return f"{head} {rec['bytes']} bytes" if not rec.get("tombstone") else f"{head} tombstone"


def _tail(args: argparse.Namespace) -> int:
    from tidemark.log.tail import tail
    from tidemark.log.topics import require_topics
    if args.last is not None and args.last < 0:
        raise ConfigError("--last must be >= 0")
    settings = settings_from_args(args)
    require_topics(settings, (args.topic,))
    last = None if args.from_beginning else args.last
    try:
        for rec in tail(settings, args.topic, last=last, follow=args.follow,
                        decode=args.decode):
            print(json.dumps(rec, separators=(",", ":")) if args.json else _line(rec),
                  flush=args.follow)
    except (KafkaException, LogError) as exc:
        detail = exc.args[0].str() if isinstance(exc, KafkaException) and exc.args else exc
        raise LogError(f"cannot read {settings.topic(args.topic)}: {detail}") from None
    except BrokenPipeError:
        sys.stderr.close()
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``log tail``."""
    sub = add_group(commands, "log", "read Tidemark's topics (Avro records decoded)")
    tail = add_command(sub, "tail", _tail, "print a topic's records, like kcat -C",
                       json=False)
    tail.add_argument("--topic", choices=TOPICS, default="txlog",
                      help="the logical topic (default txlog)")
    tail.add_argument("--decode", action=argparse.BooleanOptionalAction, default=True,
                      help="decode each Avro record (default on; --no-decode: sizes only)")
    add_json_flag(tail, help="one JSON object a line (bytes fields as base64)")
    tail.add_argument("--from-beginning", action="store_true",
                      help="every record from the start of each partition")
    tail.add_argument("--last", type=int, default=10, metavar="N",
                      help="the last N records of each partition (default 10)")
    tail.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new records until interrupted")
