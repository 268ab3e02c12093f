"""Least privilege in Kafka for a stack made with ``tidemark local up --sasl``: one SCRAM
user per role and the topic ACLs of each (Kafka's StandardAuthorizer refuses the rest).

==========  =======================================  ==========================
role        reads                                    writes
==========  =======================================  ==========================
operator    everything (a super user: topics, ACLs, config epochs, purges)
replica     txlog, queues, directory, config,        deadletter, config (its own
            deadletter, purges                       genesis, rejoin and promotion)
job         txlog, queues, directory, config,        queues, deadletter
            deadletter, purges
peer        txlog, directory, config, queues,        txlog, directory
            purges
==========  =======================================  ==========================

Only the operator appends to ``purges``: Kafka refuses a Purge from anyone else. Kafka cannot
tell one txlog record from another: a peer may append any record to txlog. What it appends
on another's behalf (an Ack, a DeliveryFailed) is refused by the queues job and the
replicas, which check each record's environment and signature; a Purge in txlog is refused
whoever signed it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tidemark.log.offsets import topic_partitions, wait_readable
from tidemark.log.settings import TOPICS, Settings

__all__ = ["ROLES", "SUPER_ROLES", "GRANTS", "acl_bindings", "grant_roles", "wait_granted"]

#: Every role of a ``--sasl`` stack; the super roles bypass ACLs.
ROLES = ("operator", "replica", "job", "peer")
SUPER_ROLES = ("operator",)

#: What each non-super role may do, by logical topic.
GRANTS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "replica": {"read": TOPICS, "write": ("deadletter", "config")},
    "job": {"read": TOPICS, "write": ("queues", "deadletter")},
    "peer": {"read": ("txlog", "directory", "config", "queues", "purges"),
             "write": ("txlog", "directory")},
}


def acl_bindings(settings: Settings) -> list[AclBinding]:
    """The ACLs of every non-super role over ``settings``' topics: READ (consumers),
    WRITE (producers), DESCRIBE_CONFIGS on each of its topics; READ on every consumer
    group (offsets are never committed, groups only name a client)."""
    out: list[AclBinding] = []

    def allow(kind: ResourceType, name: str, role: str, op: AclOperation) -> None:
        out.append(AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{role}", "*",
                              op, AclPermissionType.ALLOW))

    for role, grants in GRANTS.items():
        for topic in sorted(set(grants["read"]) | set(grants["write"])):
            allow(ResourceType.TOPIC, settings.topic(topic), role, AclOperation.DESCRIBE)
            allow(ResourceType.TOPIC, settings.topic(topic), role,
                  AclOperation.DESCRIBE_CONFIGS)
        for topic in grants["read"]:
            allow(ResourceType.TOPIC, settings.topic(topic), role, AclOperation.READ)
        for topic in grants["write"]:
            allow(ResourceType.TOPIC, settings.topic(topic), role, AclOperation.WRITE)
        if grants["write"]:
            allow(ResourceType.BROKER, "kafka-cluster", role, AclOperation.IDEMPOTENT_WRITE)
        allow(ResourceType.GROUP, "*", role, AclOperation.READ)
    return out


def grant_roles(settings: Settings, timeout_s: float = 60.0) -> int:
    """Create :func:`acl_bindings` (as the operator, a super user); returns how many."""
    admin = AdminClient(settings.admin_config())
    bindings = acl_bindings(settings)
    for future in admin.create_acls(bindings, request_timeout=timeout_s).values():
        future.result(timeout=timeout_s)
    return len(bindings)


def wait_granted(operator: Settings, settings_of: Callable[[str], Settings],
                 timeout_s: float = 60.0) -> None:
    """Wait until the brokers enforce the roles' ACLs: each non-super role looks up every
    partition of each topic it reads, as its own user (each partition's leader answers).
    Without this, a node started right after :func:`grant_roles` can be refused by a broker
    that has not applied the new ACLs yet, and exit."""
    partitions = {t: topic_partitions(operator, t, timeout=timeout_s) for t in TOPICS}
    for role, grants in GRANTS.items():
        wait_readable(settings_of(role), {t: partitions[t] for t in grants["read"]}, timeout_s)
