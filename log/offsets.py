"""Watermark lookups and record deletion (advancing the log start), riding through broker loss.

Every lookup here runs under one deadline (:class:`Lookup`). Errors a broker loss causes
(``_TRANSPORT``, ``_DESTROY_BROKER``, ``_ALL_BROKERS_DOWN``, ``_TIMED_OUT``,
``NOT_LEADER_FOR_PARTITION``, ``LEADER_NOT_AVAILABLE``, ...) are retried until that deadline:
with replication 3, leadership moves to a surviving broker within a few seconds. What is not
transient fails at once. At the deadline the error says which case it was:

* :class:`KafkaUnreachableError` when no broker of the bootstrap list answered at all
  (one line: ``cannot reach Kafka at <bootstrap> within N s``);
* :class:`TopicsMissingError` when the cluster answered and the topic does not exist;
* :class:`LogError` when the cluster answered but the lookup kept failing.

The default deadline is 30 s (each function takes ``timeout``); "unreachable" is decided after
half of it (at least 5 s) without a single answer.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tidemark.log.exceptions import KafkaUnreachableError, LogError, TopicsMissingError
from tidemark.log.settings import Settings

__all__ = ["watermarks", "wait_readable", "end_offsets", "log_start_offsets", "delete_records",
           "topic_partitions", "Lookup", "is_transient", "default_timeout",
           "DEFAULT_TIMEOUT_S", "TRANSIENT_CODES", "NEW_TOPIC_GRACE_S"]

T = TypeVar("T")

#: Default deadline of one lookup, in seconds.
DEFAULT_TIMEOUT_S = 30.0
#: The first try of a call waits this long; a timed-out try doubles it (slow, loaded cluster).
_FIRST_TRY_S = 3.0

_TRANSIENT_NAMES = (
    # librdkafka-local: connections, broker handles, metadata being refreshed
    "_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_TIMED_OUT_QUEUE", "_DESTROY_BROKER",
    "_RESOLVE", "_NODE_UPDATE", "_WAIT_COORD", "_WAIT_CACHE",
    # broker-side: leadership or ISR moving
    "NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE",
    "REQUEST_TIMED_OUT", "BROKER_NOT_AVAILABLE", "REPLICA_NOT_AVAILABLE", "NETWORK_EXCEPTION",
    "NOT_CONTROLLER", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH",
    "OFFSET_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR", "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "ELIGIBLE_LEADERS_NOT_AVAILABLE",
)
#: Error codes a broker loss (or a leadership move) produces; retried until the deadline.
TRANSIENT_CODES = frozenset(getattr(KafkaError, n) for n in _TRANSIENT_NAMES
                            if hasattr(KafkaError, n))


#: A topic or partition the client does not know (yet): checked against metadata.
_UNKNOWN = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
            KafkaError._UNKNOWN_TOPIC)


def is_transient(err: KafkaError | None) -> bool:
    """Whether ``err`` is a passing broker loss or leadership move rather than a real error."""
    if err is None or err.fatal():
        return False
    return err.code() in TRANSIENT_CODES or bool(err.retriable())


def default_timeout() -> float:
    """The lookup deadline in seconds when a caller gives none."""
    return DEFAULT_TIMEOUT_S


def _error_of(exc: BaseException) -> KafkaError | None:
    arg = exc.args[0] if exc.args else None
    return arg if isinstance(arg, KafkaError) else None


def _text(exc: BaseException) -> str:
    err = _error_of(exc)
    return err.str() if err is not None else (str(exc) or type(exc).__name__)


class Lookup:
    """One deadline shared by the Kafka calls of a lookup; retries transient broker loss.

    ``run(what, call)`` calls ``call(try_timeout)`` until it returns. A ``KafkaException``
    whose error is transient (:func:`is_transient`, or ``also_transient``), or a future that
    timed out, is retried with a short back-off; anything else becomes a :class:`LogError`
    naming ``what`` at once. Past the deadline: :class:`KafkaUnreachableError` if no call of
    this lookup ever got an answer, else :class:`LogError` with the last error.
    """

    def __init__(self, settings: Settings, timeout: float | None = None) -> None:
        self.settings = settings
        self.timeout = float(timeout) if timeout and timeout > 0 else default_timeout()
        self.reach_timeout = min(self.timeout, max(5.0, self.timeout / 2))
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout
        self.reached = False
        self.last_error = ""
        self.retries = 0

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def answered(self) -> None:
        """Record that some broker answered (the cluster is reachable)."""
        self.reached = True

    def run(self, what: str, call: Callable[[float], T],
            also_transient: Iterable[int] = (),
            on_transient: Callable[[KafkaError], None] | None = None) -> T:
        """Call ``call(try_timeout)`` until it succeeds or the deadline passes (see above)."""
        extra = set(also_transient)
        try_s = _FIRST_TRY_S
        delay = 0.1
        while True:
            timed_out = False
            try:
                out = call(max(0.5, min(self.remaining(), try_s)))
                self.reached = True
                return out
            except KafkaException as exc:
                err = _error_of(exc)
                if err is None or not (is_transient(err) or err.code() in extra):
                    raise LogError(f"{what}: {_text(exc)}") from None
                self.last_error = err.str()
                timed_out = err.code() in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)
                if on_transient is not None:
                    on_transient(err)
            except concurrent.futures.TimeoutError:
                self.last_error, timed_out = "timed out", True
            self.retries += 1
            if timed_out:  # a loaded cluster answers slowly: give the next try longer
                try_s = min(try_s * 2, self.timeout)
            now = time.monotonic()
            if not self.reached and now - self.started >= self.reach_timeout:
                raise KafkaUnreachableError(self.settings.bootstrap, round(self.reach_timeout, 1),
                                            self.last_error)
            if now >= self.deadline:
                raise LogError(f"{what}: {self.last_error} (still failing after"
                               f" {self.timeout:g} s of retries)")
            time.sleep(min(delay, self.remaining()))  # back-off between tries, not a sync
            delay = min(delay * 2, 1.0)


#: How long an unknown topic is asked for again before it counts as missing: brokers learn
#: of a topic created through another broker a moment later.
NEW_TOPIC_GRACE_S = 3.0


def wait_readable(settings: Settings, partitions: Mapping[str, Iterable[int]],
                  timeout: float | None = None,
                  on_refused: Callable[[str], None] | None = None) -> None:
    """Wait until ``settings``' user may look up every partition of ``partitions`` (logical
    topic: partition ids): the watermarks of each, a refusal retried like a broker loss
    until the deadline (topic authorization, or a topic the user's metadata does not show
    yet). A broker enforces new ACLs once it has applied them from the cluster's metadata
    log, a moment after the controller committed them. ``on_refused(text)`` hears each
    refusal before its retry.

    Each retry after a refusal asks with a new client: librdkafka keeps a topic that its
    first metadata did not show (or showed refused) as unknown, and looked it up again only
    at its next periodic refresh, minutes later, so the same client went on failing after
    the grant had taken effect (seen once as 120 s of "Unknown partition" at a stack's
    start)."""
    lookup = Lookup(settings, timeout)
    consumers = [_consumer(settings)]
    refusals = (KafkaError.TOPIC_AUTHORIZATION_FAILED, *_UNKNOWN)

    def renew(err: KafkaError) -> None:
        if err.code() in refusals:
            consumers.append(_consumer(settings))
            consumers.pop(0).close()
            if on_refused is not None:
                on_refused(err.str())
    try:
        # the cluster answers this user first: a refusal below is not an unreachable cluster
        lookup.run("metadata", lambda try_s: consumers[0].list_topics(timeout=try_s))
        for logical, ids in partitions.items():
            topic = settings.topic(logical)
            for p in ids:
                tp = TopicPartition(topic, p)

                def call(try_s: float, tp: TopicPartition = tp) -> None:
                    consumers[0].get_watermark_offsets(tp, timeout=try_s, cached=False)
                lookup.run(f"{topic}[{p}] as this user", call, also_transient=refusals,
                           on_transient=renew)
    finally:
        consumers[0].close()


def _consumer(settings: Settings) -> Consumer:
    return Consumer(settings.consumer_config())


def _partitions(client: Consumer | AdminClient, settings: Settings, topic: str,
                lookup: Lookup) -> list[int]:
    """Partition ids of physical ``topic`` from metadata, retried; TopicsMissingError if none."""
    def attempt(try_s: float) -> list[int]:
        md = client.list_topics(topic, timeout=try_s)
        lookup.answered()
        meta = md.topics.get(topic)
        err = meta.error if meta is not None else None
        if meta is None or (err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            if time.monotonic() - lookup.started < NEW_TOPIC_GRACE_S:
                # a topic created a moment ago may not be in this broker's metadata yet
                raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
            raise TopicsMissingError([topic], settings.bootstrap)
        if err is not None:
            raise KafkaException(err)
        if not meta.partitions:  # being created, or metadata not propagated yet
            raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
        return sorted(meta.partitions)
    return lookup.run(f"metadata of {topic}", attempt)


def topic_partitions(settings: Settings, logical_topic: str,
                     timeout: float | None = None) -> list[int]:
    """Partition ids of a logical topic (retries broker loss; raises TopicsMissingError,
    KafkaUnreachableError or LogError)."""
    lookup = Lookup(settings, timeout)
    consumer = _consumer(settings)
    try:
        return _partitions(consumer, settings, settings.topic(logical_topic), lookup)
    finally:
        consumer.close()


def watermarks(settings: Settings, logical_topic: str, partitions: Iterable[int] | None = None,
               timeout: float | None = None) -> dict[int, tuple[int, int]]:
    """``{partition: (log_start, high_watermark)}`` for a logical topic.

    All partitions when ``partitions`` is None. Transient broker loss is retried until the
    deadline (``timeout`` seconds, default :func:`default_timeout`).
    """
    topic = settings.topic(logical_topic)
    lookup = Lookup(settings, timeout)
    consumer = _consumer(settings)
    try:
        known: list[int] = []
        if partitions is None:
            partitions = known = _partitions(consumer, settings, topic, lookup)

        def unknown(p: int) -> Callable[[KafkaError], None]:
            def check(err: KafkaError) -> None:
                # Unknown topic or partition: passing right after creation. A topic that does
                # not exist is TopicsMissingError, a partition it lacks a LogError, both at once
                # (asked once per lookup, from metadata).
                if err.code() not in _UNKNOWN:
                    return
                if not known:
                    known.extend(_partitions(consumer, settings, topic, lookup))
                if p not in known:
                    raise LogError(f"{topic} has no partition {p} (it has {len(known)})")
            return check

        def marks_of(tp: TopicPartition) -> Callable[[float], tuple[int, int]]:
            def call(try_s: float) -> tuple[int, int]:
                lo, hi = consumer.get_watermark_offsets(tp, timeout=try_s, cached=False)
                return int(lo), int(hi)
            return call

        out: dict[int, tuple[int, int]] = {}
        for p in partitions:
            out[p] = lookup.run(f"watermarks of {topic}[{p}]", marks_of(TopicPartition(topic, p)),
                                also_transient=_UNKNOWN, on_transient=unknown(p))
        return out
    finally:
        consumer.close()


def end_offsets(settings: Settings, logical_topic: str,
                partitions: Iterable[int] | None = None,
                timeout: float | None = None) -> dict[int, int]:
    """High watermark per partition (retries broker loss, see :func:`watermarks`)."""
    return {p: hi for p, (_, hi) in watermarks(settings, logical_topic, partitions,
                                               timeout).items()}


def log_start_offsets(settings: Settings, logical_topic: str,
                      partitions: Iterable[int] | None = None,
                      timeout: float | None = None) -> dict[int, int]:
    """Log start offset per partition (retries broker loss, see :func:`watermarks`)."""
    return {p: lo for p, (lo, _) in watermarks(settings, logical_topic, partitions,
                                               timeout).items()}


def delete_records(settings: Settings, logical_topic: str, before: dict[int, int],
                   timeout: float = 30.0) -> dict[int, int]:
    """Advance the log start of each partition to ``before[p]``; returns the new starts.

    Idempotent, so a partition whose request hit a broker loss is simply asked again.
    """
    admin = AdminClient(settings.admin_config())
    topic = settings.topic(logical_topic)
    lookup = Lookup(settings, timeout)
    pending = dict(before)
    out: dict[int, int] = {}

    def attempt(try_s: float) -> None:
        futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in pending.items()],
                                       request_timeout=try_s)
        first: BaseException | None = None
        for tp, fut in futures.items():
            try:
                result = fut.result(try_s + 5)
            except (KafkaException, concurrent.futures.TimeoutError) as exc:
                first = first or exc
                continue
            out[tp.partition] = getattr(result, "low_watermark", None) or before[tp.partition]
            pending.pop(tp.partition, None)
        if first is not None:
            raise first

    if pending:
        lookup.run(f"delete records of {topic}", attempt)
    return out
