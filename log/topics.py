"""Topic bootstrap with the durable defaults, and the under-replication check."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from log.exceptions import LogError, UnderReplicatedError
from typing import Callable

from log.settings import TOPICS, Settings

__all__ = ["TopicSpec", "topic_specs", "ensure_topics", "describe_topics", "check_replication",
           "delete_topic_set"]


@dataclass(frozen=True)
class TopicSpec:
    """One topic's physical name, partition count and configs."""

    name: str
    partitions: int
    config: dict[str, str]


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """The five topics of the design with replication 3, min ISR 2, no unclean election."""
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
    ]


def ensure_topics(settings: Settings, timeout_s: float = 60.0) -> list[str]:
    """Create any missing topic; returns the names created. Retries while brokers join."""
    admin = AdminClient(settings.admin_config())
    created: list[str] = []
    deadline = time.monotonic() + timeout_s
    pending = topic_specs(settings)
    last_error = ""
    while pending:
        existing = set(admin.list_topics(timeout=10).topics)
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
            _wait_leaders(admin, [s.name for s in topic_specs(settings)], deadline)
        if pending:
            if time.monotonic() > deadline:
                raise LogError(f"could not create topics {[s.name for s in pending]}: {last_error}")
            time.sleep(1.0)
    return created


def _wait_leaders(admin: AdminClient, names: list[str], deadline: float) -> None:
    """Wait until every partition of ``names`` has a leader and a full ISR."""
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        if all(n in md.topics and md.topics[n].partitions and all(
                p.leader >= 0 and len(p.isrs) == len(p.replicas)
                for p in md.topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.2)


def describe_topics(settings: Settings) -> dict[str, dict]:
    """Per topic: partitions, replication factor, min ISR, and the smallest ISR size."""
    admin = AdminClient(settings.admin_config())
    md = admin.list_topics(timeout=10)
    out: dict[str, dict] = {}
    names = [s.name for s in topic_specs(settings) if s.name in md.topics]
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
    configs = admin.describe_configs(resources) if resources else {}
    for res, fut in configs.items():
        md_topic = md.topics[res.name]
        cfg = fut.result()
        parts = md_topic.partitions.values()
        out[res.name] = {
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
        raise LogError(f"topic {settings.topic('txlog')} does not exist: run topic bootstrap")
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
