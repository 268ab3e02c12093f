"""Operator view of ``deadletter``: list what is there, re-send a dead-lettered message.

Two kinds of record share the topic (``tidemark.source`` header):

* ``delivery``: a Send whose handler failed ``delivery_limit`` times, written by the queues
  job (source ``spark-delivery``) with its count, last reason, peer and txlog offset;
* ``poison``: a record some component could not decode or apply (the queues job's
  ``spark-queues``, a replica's own source), with its reason.

A batch the queues job re-runs after a crash writes its letters again, so ``delivery``
letters are deduplicated by (peer, message id, txlog partition, txlog offset).

:func:`replay` re-sends a ``delivery`` letter's original Send to its recipient through txlog
as an *operator re-send*: the same sender, type and payload, ``delivery_count`` 0, and the
message id ``<id>~replay-<deadletter partition>.<deadletter offset>``. The new id queues once
with count 0 (the original id stays remembered so that a duplicate of the poison message is
dropped), and re-running ``replay`` for the same letter sends the same id again, which the
job ignores as a duplicate while it is queued or remembered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from tidemark.log.consumer import read_to_end
from tidemark.log.exceptions import CodecError
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.log.wire import default_codec
from tidemark.spark_streaming.exceptions import QueuesError
from tidemark.spark_streaming.sink import LETTER_SOURCE

__all__ = ["DeadLetter", "DELIVERY", "POISON", "read_letters", "replay", "replay_id"]

DELIVERY, POISON = "delivery", "poison"


@dataclass(frozen=True)
class DeadLetter:
    """One record of ``deadletter``, as an operator sees it."""

    kind: str                  # DELIVERY or POISON
    peer: str
    message_id: str
    sender: str
    message_type: str
    count: int                 # failed deliveries (0 for poison)
    reason: str
    time_ms: int               # when it was written to deadletter
    source: str
    txlog_partition: int
    txlog_offset: int
    partition: int             # where it is in deadletter
    offset: int

    def as_json(self) -> dict[str, Any]:
        """A plain dict (``--json``)."""
        return asdict(self)


def replay_id(message_id: str, letter: DeadLetter) -> str:
    """The message id of an operator re-send of ``letter``."""
    return f"{message_id}~replay-{letter.partition}.{letter.offset}"


def _int(text: str, default: int = -1) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def _letter(msg: Any) -> tuple[DeadLetter, bytes | None]:
    heads = {k: (v or b"").decode("utf-8", "replace") for k, v in (msg.headers() or [])}
    source = heads.get("tidemark.source", "")
    key = msg.key() or b""
    value = msg.value()
    kind = DELIVERY if source == LETTER_SOURCE else POISON
    peer = heads.get("tidemark.peer") or key.decode("utf-8", "replace")
    mid = heads.get("tidemark.message_id", "")
    sender = mtype = ""
    if value is not None:
        try:
            rec = default_codec().decode(value).record
            mid = mid or str(rec.get("message_id", ""))
            sender, mtype = str(rec.get("sender", "")), str(rec.get("message_type", ""))
        except CodecError:
            pass
    return DeadLetter(kind, peer, mid, sender, mtype, _int(heads.get("tidemark.delivery_count",
                                                                     "0"), 0),
                      heads.get("tidemark.reason", ""), msg.timestamp()[1], source,
                      _int(heads.get("tidemark.partition", "-1")),
                      _int(heads.get("tidemark.offset", "-1")),
                      msg.partition(), msg.offset()), value


def _scan(settings: Settings, timeout_s: float) -> Iterator[tuple[DeadLetter, bytes | None]]:
    seen: set[tuple[str, str, int, int]] = set()
    for batch in read_to_end(settings, "deadletter", timeout_s=timeout_s):
        for msg in batch:
            letter, value = _letter(msg)
            if letter.kind == DELIVERY:
                ident = (letter.peer, letter.message_id, letter.txlog_partition,
                         letter.txlog_offset)
                if ident in seen:
                    continue  # written again by a re-run batch
                seen.add(ident)
            yield letter, value


def read_letters(settings: Settings, peer: str | None = None,
                 timeout_s: float = 60.0) -> list[DeadLetter]:
    """Every record of ``deadletter`` (of ``peer`` only, if given), oldest first."""
    out = [x for x, _ in _scan(settings, timeout_s) if peer is None or x.peer == peer]
    return sorted(out, key=lambda x: (x.time_ms, x.partition, x.offset))


def replay(settings: Settings, message_id: str, peer: str | None = None,
           timeout_s: float = 60.0) -> dict[str, Any]:
    """Re-send the dead-lettered message ``message_id`` (the latest letter of it) to its
    recipient; returns what was done. Raises :class:`QueuesError` with one line when there is
    no such letter, several peers have one and ``peer`` is not given, or Kafka refuses."""
    found = [(x, v) for x, v in _scan(settings, timeout_s)
             if x.kind == DELIVERY and x.message_id == message_id
             and (peer is None or x.peer == peer)]
    if not found:
        where = f" of peer {peer}" if peer else ""
        raise QueuesError(f"no dead-lettered message {message_id!r}{where} in"
                          f" {settings.topic('deadletter')}")
    peers = sorted({x.peer for x, _ in found})
    if len(peers) > 1:
        raise QueuesError(f"message {message_id!r} is dead-lettered for several peers"
                          f" ({', '.join(peers)}): choose one with --peer")
    letter, value = max(found, key=lambda f: (f[0].time_ms, f[0].partition, f[0].offset))
    if value is None:
        raise QueuesError(f"the letter of {message_id!r} has no message bytes (the Send was"
                          " gone from txlog when it was dead-lettered): nothing to re-send")
    codec = default_codec()
    try:
        rec = dict(codec.decode(value).record)
    except CodecError as exc:
        raise QueuesError(f"the letter of {message_id!r} does not decode: {exc}") from None
    new_id = replay_id(message_id, letter)
    rec.update(message_id=new_id, delivery_count=0, direct_incarnation=None,
               timestamp_ms=int(time.time() * 1000))
    done: dict[str, Any] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        done.update(error=err, partition=msg.partition(), offset=msg.offset())

    producer = LogProducer(settings)
    producer.produce("txlog", rec["recipient"], "Send", rec, on_delivery=on_delivery)
    producer.flush()
    if done.get("error") is not None or "offset" not in done:
        raise QueuesError(f"re-sending {message_id!r} to txlog failed:"
                          f" {done.get('error') or 'no delivery report'}")
    return {"message_id": message_id, "replay_id": new_id, "peer": rec["recipient"],
            "sender": rec["sender"], "message_type": rec["message_type"],
            "failed": letter.count, "reason": letter.reason,
            "txlog_partition": done["partition"], "txlog_offset": done["offset"]}
