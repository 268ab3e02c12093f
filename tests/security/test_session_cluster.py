"""``make test``'s own cluster runs with SASL and ACLs on: a client without credentials is
refused, every test client signs in, and a test stack's replica nodes sign in as the
``replica`` user, limited by the ACLs granted on their topic prefix."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests import cluster
from tidemark.log.settings import Settings
from tidemark.stack.launcher import LocalStack

pytestmark = pytest.mark.integration


@pytest.fixture
def secured(kafka_stack: object) -> None:
    if os.environ.get("TIDEMARK_BOOTSTRAP"):
        pytest.skip("an existing cluster is used as it is")


def test_the_session_cluster_refuses_a_client_without_credentials(
        secured: None, fresh_settings: Settings) -> None:
    assert fresh_settings.client["security.protocol"] == "SASL_PLAINTEXT"
    assert fresh_settings.client["sasl.username"] == "operator"
    assert set(cluster.roles()) == {"operator", "replica", "job", "peer"}
    anonymous = AdminClient(replace(fresh_settings, client={}).admin_config())
    with pytest.raises(KafkaException):
        anonymous.list_topics(timeout=8)
    wrong = replace(fresh_settings, client={**fresh_settings.client, "sasl.password": "x"})
    with pytest.raises(KafkaException):
        AdminClient(wrong.admin_config()).list_topics(timeout=8)


def test_a_test_stack_grants_its_replica_user_acls_on_its_own_topics(
        secured: None, bootstrap: str, tmp_path: Path) -> None:
    from tests.replicas import replica_stack  # grpc and the replica extra: only here
    with replica_stack(bootstrap, tmp_path / "stack", "1x1") as stack:
        _assert_replica_user(stack)


def _assert_replica_user(stack: LocalStack) -> None:
    settings = stack.settings()
    admin = AdminClient(settings.admin_config())
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, settings.topic("config"), ResourcePatternType.LITERAL,
        "User:replica", "*", AclOperation.WRITE, AclPermissionType.ALLOW)).result(timeout=30)
    assert found, "the replica user has no WRITE on the stack's config topic"
    txlog = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, settings.topic("txlog"), ResourcePatternType.LITERAL,
        "User:replica", "*", AclOperation.WRITE, AclPermissionType.ALLOW)).result(timeout=30)
    assert not txlog, "the replica user may append to txlog"
    nodes = [spec for spec in stack.processes() if spec.kind == "replica"]
    assert nodes
    for spec in nodes:
        environ = Path(f"/proc/{spec.pid}/environ").read_bytes().split(b"\0")
        assert b"TIDEMARK_KAFKA_SASL_USERNAME=replica" in environ, spec.name
