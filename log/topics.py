"""Topic bootstrap with the durable defaults, and the under-replication check."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tidemark.log.exceptions import LogError, TopicsMissingError, UnderReplicatedError
from tidemark.log.offsets import NEW_TOPIC_GRACE_S, Lookup
from tidemark.log.settings import TOPICS, Settings

__all__ = ["TopicSpec", "topic_specs", "ensure_topics", "prefer_leaders", "describe_topics",
           "check_replication",
           "delete_topic_set", "cluster_metadata", "require_topics"]


@dataclass(frozen=True)
class TopicSpec:
    """One topic's physical name, partition count and configs."""

    name: str
    partitions: int
    config: dict[str, str]


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """The six topics of the design with replication 3, min ISR 2, no unclean election.
    ``purges`` has txlog's partition count (a peer's Purge lands in the partition number of
    its txlog partition) and keeps each peer's latest Purge for good (compacted)."""
    durable = {
        "min.insync.replicas": str(settings.min_insync_replicas),
        "unclean.leader.election.enable": "false",
        "max.message.bytes": str(settings.max_message_bytes + 4096),
    }
    p = settings.partitions
    return [
        TopicSpec(settings.topic("txlog"), p, {**durable, "cleanup.policy": "delete",
                                               "retention.ms": str(settings.txlog_retention_ms)}),
        TopicSpec(settings.topic("queues"), p, {
            **durable, "cleanup.policy": "compact",
            "delete.retention.ms": str(settings.queues_delete_retention_ms)}),
        TopicSpec(settings.topic("directory"), 3, {**durable, "cleanup.policy": "compact"}),
        TopicSpec(settings.topic("config"), 1, {**durable, "cleanup.policy": "delete",
                                                "retention.ms": "-1", "retention.bytes": "-1"}),
        TopicSpec(settings.topic("deadletter"), 3, {**durable, "cleanup.policy": "delete"}),
        TopicSpec(settings.topic("purges"), p, {**durable, "cleanup.policy": "compact"}),
    ]


def _metadata(admin: AdminClient, lookup: Lookup, need: Iterable[str] = ()) -> Any:
    """Cluster metadata, retried through broker loss. A topic of ``need`` that is listed
    without partitions (being created, or leaderless for a moment) counts as transient."""
    need = list(need)

    def attempt(try_s: float) -> Any:
        md = admin.list_topics(timeout=try_s)
        lookup.answered()
        for name in need:
            meta = md.topics.get(name)
            if meta is not None and not meta.partitions:
                raise KafkaException(meta.error or KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
        return md
    return lookup.run("cluster metadata", attempt)


def _unknown(err: KafkaError | None) -> bool:
    return err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def cluster_metadata(settings: Settings, timeout: float | None = None) -> Any:
    """confluent_kafka ``ClusterMetadata`` (brokers, topics); retries broker loss until the
    deadline, then raises :class:`KafkaUnreachableError` (no broker answered) or
    :class:`LogError`."""
    return _metadata(AdminClient(settings.admin_config()), Lookup(settings, timeout))


def require_topics(settings: Settings, logical_topics: Iterable[str] = TOPICS,
                   timeout: float | None = None) -> dict[str, int]:
    """Start-up check: ``{logical topic: partition count}`` for topics that must exist.

    Rides through the loss of a broker (retries until the deadline). Tells the two real
    failures apart, each one line: :class:`KafkaUnreachableError` ("cannot reach Kafka at
    <bootstrap> within N s") when no broker answers, :class:`TopicsMissingError` ("topics X
    do not exist ...: run `tidemark topics create`") when the cluster answers without them.
    """
    logical = list(logical_topics)
    names = {t: settings.topic(t) for t in logical}
    admin, lookup = AdminClient(settings.admin_config()), Lookup(settings, timeout)
    while True:
        md = _metadata(admin, lookup, names.values())
        missing = [n for n in names.values()
                   if n not in md.topics or _unknown(md.topics[n].error)]
        if not missing:
            break
        # a topic created a moment ago may not be in this broker's metadata yet (seen under
        # CPU starvation: created and led on one broker, unknown to another for over 1 s)
        if time.monotonic() - lookup.started >= NEW_TOPIC_GRACE_S:
            raise TopicsMissingError(missing, settings.bootstrap)
        time.sleep(0.2)  # back-off between metadata reads, not a synchronization
    return {t: len(md.topics[n].partitions) for t, n in names.items()}


def ensure_topics(settings: Settings, timeout_s: float = 60.0) -> list[str]:
    """Create any missing topic; returns the names created. Retries while brokers join."""
    admin = AdminClient(settings.admin_config())
    created: list[str] = []
    lookup = Lookup(settings, timeout_s)
    pending = topic_specs(settings)
    last_error = ""
    while pending:
        existing = set(_metadata(admin, lookup).topics)
        todo = [s for s in pending if s.name not in existing]
        if not todo:
            break
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, settings.replication_factor, config=s.config)
             for s in todo], operation_timeout=30)
        retry = []
        for spec in todo:
            try:
                futures[spec.name].result()
                created.append(spec.name)
            except KafkaException as exc:
                err = exc.args[0]
                if err.name() == "TOPIC_ALREADY_EXISTS":
                    continue
                last_error = err.str()
                retry.append(spec)
        pending = retry
        if not pending:
            _wait_leaders(admin, [s.name for s in topic_specs(settings)], lookup.deadline)
            if created:
                prefer_leaders(admin, created, lookup.deadline)
        if pending:
            if time.monotonic() > lookup.deadline:
                raise LogError(f"could not create topics {[s.name for s in pending]}: {last_error}")
            time.sleep(1.0)  # back-off while brokers join, not a synchronization
    return created


def _wait_leaders(admin: AdminClient, names: list[str], deadline: float) -> None:
    """Wait until every partition of ``names`` has a leader and a full ISR."""
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=max(0.5, min(10.0, deadline - time.monotonic())))
        except KafkaException:  # a broker going away: ask again
            md = None
        if md is not None and all(n in md.topics and md.topics[n].partitions and all(
                p.leader >= 0 and len(p.isrs) == len(p.replicas)
                for p in md.topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.2)


def prefer_leaders(admin: AdminClient, names: list[str], deadline: float) -> bool:
    """Move the leadership of every partition of ``names`` to its preferred replica (the
    first of its replica list), retrying until it holds or ``deadline``; returns whether it
    holds. Topics created while some brokers were still fenced (right after a cluster
    starts) get every leader on the broker that was not: measured on a fresh local stack,
    one broker led all 12 txlog partitions and did all the produce and fetch work, until
    the controller's periodic rebalance (every 5 minutes) moved them, in the middle of
    whatever ran then. Gives up at once if the cluster does not let this client elect
    leaders (an external cluster's ACLs), and after 15 s at most."""
    deadline = min(deadline, time.monotonic() + 15)
    while True:
        try:
            md = admin.list_topics(timeout=max(0.5, min(10.0, deadline - time.monotonic())))
            off = [TopicPartition(n, p.id) for n in names if n in md.topics
                   for p in md.topics[n].partitions.values()
                   if p.replicas and p.leader != p.replicas[0]]
        except KafkaException:  # a broker going away: ask again
            off = None
        if off == []:
            return True
        if time.monotonic() >= deadline:
            return False
        if off:
            try:  # fails while the preferred broker is still fenced: tried again below
                admin.elect_leaders(ElectionType.PREFERRED, off).result(10)
            except KafkaException as exc:
                if exc.args[0].code() in (KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                                          KafkaError.TOPIC_AUTHORIZATION_FAILED):
                    return False
        time.sleep(0.2)  # back-off between elections, not a synchronization


def describe_topics(settings: Settings, timeout: float | None = None) -> dict[str, dict[str, Any]]:
    """Per topic: partitions, replication factor, min ISR, and the smallest ISR size.

    Topics of the set that do not exist are left out. Retries broker loss until the
    deadline (``timeout`` seconds, default 30).
    """
    admin = AdminClient(settings.admin_config())
    lookup = Lookup(settings, timeout)
    wanted = [s.name for s in topic_specs(settings)]
    md = _metadata(admin, lookup, wanted)
    # a topic created a moment ago may not be in every broker's cache yet
    while not all(n in md.topics for n in wanted) \
            and time.monotonic() - lookup.started < NEW_TOPIC_GRACE_S:
        time.sleep(0.2)  # back-off between metadata reads, not a synchronization
        md = _metadata(admin, lookup, wanted)
    names = [n for n in wanted if n in md.topics]
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]

    def configs(try_s: float) -> dict[str, Any]:
        futures = admin.describe_configs(resources, request_timeout=try_s) if resources else {}
        return {res.name: fut.result(try_s + 5) for res, fut in futures.items()}

    found = lookup.run("topic configs", configs)
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        md_topic = md.topics[name]
        cfg = found[name]
        parts = md_topic.partitions.values()
        out[name] = {
            "partitions": len(md_topic.partitions),
            "replication_factor": min(len(p.replicas) for p in parts),
            "min_isr": min(len(p.isrs) for p in parts),
            "min.insync.replicas": int(cfg["min.insync.replicas"].value),
            "cleanup.policy": cfg["cleanup.policy"].value,
            "unclean.leader.election.enable": cfg["unclean.leader.election.enable"].value,
        }
    return out


def check_replication(settings: Settings, allow_under_replicated: bool = False) -> None:
    """Refuse to run when txlog is under-replicated, unless explicitly allowed."""
    info = describe_topics(settings).get(settings.topic("txlog"))
    if info is None:
        raise TopicsMissingError([settings.topic("txlog")], settings.bootstrap)
    if allow_under_replicated:
        return
    if info["replication_factor"] < settings.replication_factor:
        raise UnderReplicatedError(
            f"{settings.topic('txlog')} has replication factor {info['replication_factor']},"
            f" need {settings.replication_factor} (pass --allow-under-replicated to run anyway)")
    if info["min_isr"] < info["replication_factor"]:
        raise UnderReplicatedError(
            f"{settings.topic('txlog')} is under-replicated: a partition has {info['min_isr']}"
            f" of {info['replication_factor']} replicas in sync (min.insync.replicas="
            f"{info['min.insync.replicas']}); pass --allow-under-replicated to run anyway")


def delete_topic_set(settings: Settings, report: Callable[[str], None] = lambda m: None) -> None:
    """Delete the five topics of ``settings``' prefix (tests, benchmarks); waits for them.

    Best effort: a topic already gone, or one the cluster refuses to delete, is reported
    through ``report`` and skipped.
    """
    admin = AdminClient(settings.admin_config())  # must outlive the futures
    futures = admin.delete_topics([settings.topic(t) for t in TOPICS], operation_timeout=30)
    for fut in futures.values():
        try:
            fut.result(60)
        except Exception as exc:  # noqa: BLE001 - already gone, or refused: say so, go on
            report(f"could not delete a topic: {exc}")
