"""``tidemark deadletter list|replay``: the queues job's dead letters (messages whose handler
failed ``delivery_limit`` times) and every poison record in the ``deadletter`` topic."""

from __future__ import annotations

import argparse
import time

from confluent_kafka import KafkaException

from tidemark.log.exceptions import LogError
from tidemark.options import add_command, add_group, print_json, settings_from_args
from tidemark.spark_streaming.exceptions import QueuesError

__all__ = ["register"]


def _readable(exc: Exception, settings_text: str) -> QueuesError:
    detail = exc.args[0].str() if isinstance(exc, KafkaException) and exc.args else str(exc)
    return QueuesError(f"cannot read or write {settings_text}: {detail}")


def _list(args: argparse.Namespace) -> int:
    from tidemark.log.topics import require_topics
    from tidemark.spark_streaming.deadletters import read_letters
    settings = settings_from_args(args)
    require_topics(settings, ("deadletter",))
    try:
        letters = read_letters(settings, args.peer, timeout_s=args.timeout)
    except (KafkaException, LogError) as exc:
        raise _readable(exc, settings.topic("deadletter")) from None
    if args.json:
        print_json([x.as_json() for x in letters])
        return 0
    if not letters:
        print("no dead letters" + (f" for peer {args.peer}" if args.peer else ""))
        return 0
    print(f"{'kind':<8} {'peer':<16} {'message id':<24} {'sender':<14} {'type':<20}"
          f" {'count':>5}  {'time (UTC)':<19}  reason")
    for x in letters:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(x.time_ms / 1000))
        print(f"{x.kind:<8} {x.peer:<16} {x.message_id or '-':<24} {x.sender or '-':<14}"
              f" {x.message_type or '-':<20} {x.count:>5}  {when:<19}  {x.reason[:120]}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from tidemark.log.topics import require_topics
    from tidemark.spark_streaming.deadletters import replay
    settings = settings_from_args(args)
    require_topics(settings, ("deadletter", "txlog"))
    try:
        done = replay(settings, args.id, args.peer, timeout_s=args.timeout)
    except (KafkaException, LogError) as exc:
        raise _readable(exc, settings.topic("deadletter")) from None
    if args.json:
        print_json(done)
        return 0
    print(f"re-sent {done['message_id']} ({done['message_type']} from {done['sender']}, failed"
          f" {done['failed']} times: {done['reason'][:200]}) to {done['peer']} as"
          f" {done['replay_id']} with delivery count 0 (txlog partition"
          f" {done['txlog_partition']} offset {done['txlog_offset']})")
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``deadletter list`` and ``deadletter replay``."""
    sub = add_group(commands, "deadletter", "dead-lettered messages and poison records")
    lst = add_command(sub, "list", _list, "what is in the deadletter topic (delivery failures"
                                          " and poison records)")
    lst.add_argument("--peer", default=None, help="only this peer's")
    lst.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                     help="how long reading the topic to its end may take")
    rep = add_command(sub, "replay", _replay, "re-send a dead-lettered message to its recipient"
                                              " once, with its delivery count reset")
    rep.add_argument("id", metavar="ID", help="the dead-lettered message id")
    rep.add_argument("--peer", default=None, help="the recipient (when several have ID)")
    rep.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                     help="how long to look for the letter")
