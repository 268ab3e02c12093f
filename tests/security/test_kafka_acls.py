"""`tidemark local up --sasl`: a real broker whose only client listener is SASL_PLAINTEXT
SCRAM-SHA-256 (credentials added at storage format time), one SCRAM user per role and
KRaft's StandardAuthorizer with each role's topic ACLs. The CLI's `load` (operator), the
project's librdkafka consumer, a replica node (replica user) and the Spark job (job user)
work through it; a client without credentials, or with a wrong password, is refused; each
role appends only where its ACLs allow (a peer's user appending a config epoch, a queue
record or a dead letter is refused by Kafka); peers on the peer user deliver once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tests import cluster
from tests.replicas import ends, status, txlog_ust
from tests.support import Job, wait_for
from tidemark.log.consumer import read_to_end
from tidemark.log.exceptions import ConfigError, LogError
from tidemark.log.offsets import wait_readable
from tidemark.log.settings import Settings, load_settings
from tidemark.peer_client.peer import Peer
from tidemark.stack.acls import wait_granted
from tidemark.stack.launcher import LocalStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
_ENV = {"TIDEMARK_REPLICATION_FACTOR": "1", "TIDEMARK_MIN_INSYNC_REPLICAS": "1",
        "TIDEMARK_PARTITIONS": "2"}


def tidemark(*args: str, state: Path) -> subprocess.CompletedProcess:
    env = cluster.apart(os.environ)
    env.update(_ENV, TIDEMARK_STATE_DIR=str(state))
    proc = subprocess.run([sys.executable, "-m", "tidemark", *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def sasl_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    state = tmp_path_factory.mktemp("sasl") / "state"
    with cluster.elsewhere():
        saved = {k: os.environ.get(k) for k in _ENV}
        os.environ.update(_ENV)
        try:
            out = tidemark("local", "up", "--sasl", "--brokers", "1", "--replicas", "1x1",
                           state=state)
            assert "(SASL_PLAINTEXT)" in out.stdout
            yield LocalStack(state)
        finally:
            subprocess.run([sys.executable, "-m", "tidemark", "local", "down", "--grace", "5"],
                           env={**os.environ, "TIDEMARK_STATE_DIR": str(state)},
                           capture_output=True, timeout=120)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def test_state_records_the_sasl_client_settings(sasl_stack: LocalStack) -> None:
    state = json.loads(sasl_stack.state_file.read_text())
    client = state["client"]
    assert client["security.protocol"] == "SASL_PLAINTEXT"
    assert client["sasl.mechanism"] == "SCRAM-SHA-256" and client["sasl.username"] == "operator"
    assert set(state["roles"]) == {"operator", "replica", "job", "peer"}
    assert state["roles"]["operator"] == client and state["acls"] > 0
    props = (sasl_stack.state_dir / "broker-1" / "server.properties").read_text()
    assert "StandardAuthorizer" in props and "allow.everyone.if.no.acl.found=false" in props
    assert "listeners=SASL_PLAINTEXT://127.0.0.1:" in props and "PLAINTEXT://127.0.0.1" not in \
        props.replace("SASL_PLAINTEXT://", "").split("CONTROLLER://")[0]
    assert dict(sasl_stack.settings().client) == client


def test_load_consumer_and_replica_work_with_credentials(sasl_stack: LocalStack) -> None:
    summary = json.loads(tidemark("load", "--peers", "5", "--messages", "400", "--json",
                                  state=sasl_stack.state_dir).stdout)
    assert summary["sent"] == 400
    settings = sasl_stack.settings()
    target = ends(sasl_stack)
    read = sum(len(batch) for batch in read_to_end(settings, "txlog", timeout_s=60))
    assert read == sum(target.values()) >= 400
    wait_for(lambda: txlog_ust(status(sasl_stack)) == target, 90,
             what="the replica node's cut at the txlog ends, read through SASL")


@pytest.mark.parametrize("client", [{}, "wrong password"])
def test_clients_without_valid_credentials_are_refused(sasl_stack: LocalStack,
                                                       client: dict | str) -> None:
    settings = sasl_stack.settings()
    if client == "wrong password":
        bad = replace(settings, client={**settings.client, "sasl.password": "not-it"})
    else:
        bad = replace(settings, client={})
    admin = AdminClient(bad.admin_config())
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=8)
    AdminClient(settings.admin_config()).list_topics(timeout=30)  # the right ones pass


def test_the_spark_job_reads_and_writes_through_sasl(sasl_stack: LocalStack) -> None:
    """The queues job (Spark's Java Kafka source and sink, settings translated to the Java
    client's JAAS config) materializes the queues of the load through the SCRAM listener."""
    from tests.support import expected_queues
    from tidemark.spark_streaming.depth import read_queues
    from tidemark.stack import spark_plan

    settings = sasl_stack.settings()
    sasl_stack.up(brokers=1, extra=[spark_plan], timeout_s=120)
    expected, _, _ = expected_queues(settings)
    assert expected

    def converged() -> bool:
        return read_queues(settings, timeout_s=30).queues == expected
    wait_for(converged, 400, what="the queues job's view equal to the model, through SASL")


def _as(stack: LocalStack, role: str) -> Settings:
    return load_settings(state_dir=stack.state_dir,
                         env={**os.environ, "TIDEMARK_STACK_ROLE": role})


def _append(settings: Settings, topic: str, value: bytes = b"forged", key: bytes = b"k"
            ) -> KafkaError | None:
    """Append one record to ``topic``; the delivery error (None: appended)."""
    errors: list[KafkaError | None] = []
    producer = Producer(settings.producer_config())
    producer.produce(settings.topic(topic), value, key=key,
                     on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(60)
    assert errors, f"no delivery report for {topic} within 60 s"
    return errors[0]


def _count(settings: Settings, topic: str) -> int:
    return sum(1 for _ in read_to_end(settings, topic))


@pytest.mark.parametrize("role, allowed, refused", [
    ("peer", ("txlog", "directory"), ("config", "queues", "deadletter", "purges")),
    ("job", ("queues", "deadletter"), ("txlog", "config", "directory", "purges")),
    ("replica", ("deadletter",), ("txlog", "queues", "directory", "purges")),
])
def test_each_role_appends_only_where_its_acls_allow(sasl_stack: LocalStack, role: str,
                                                     allowed: tuple[str, ...],
                                                     refused: tuple[str, ...]) -> None:
    settings, operator = _as(sasl_stack, role), _as(sasl_stack, "operator")
    assert settings.client["sasl.username"] == role
    for topic in refused:
        before = _count(operator, topic)
        err = _append(settings, topic)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
            f"{role} appended to {topic}: {err}"
        assert _count(operator, topic) == before, f"{topic} changed"
    for topic in allowed:
        assert _append(settings, topic) is None, f"{role} could not append to {topic}"


def test_a_peers_user_cannot_purge_and_the_operator_can(sasl_stack: LocalStack) -> None:
    """Purges have a topic of their own that only the operator may write: a Purge from a
    peer's credentials is refused by Kafka and nothing lands; the operator's is taken."""
    from tidemark.log.partitioner import partition_for_peer
    from tidemark.log.wire import default_codec
    peer, operator = _as(sasl_stack, "peer"), _as(sasl_stack, "operator")
    part = partition_for_peer("victim", peer.partitions)
    value = default_codec().encode("Purge", {
        "peer": "victim", "environment": peer.environment, "timestamp_ms": 1,
        "txlog_partition": part, "below_offset": 1 << 40, "signer": b"", "signature": b""})
    before = _count(operator, "purges")
    err = _append(peer, "purges", value, b"victim")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    assert _count(operator, "purges") == before
    assert _append(operator, "purges", value, b"victim") is None
    assert _count(operator, "purges") == before + 1


def test_local_up_waits_until_the_brokers_enforce_the_grants(sasl_stack: LocalStack) -> None:
    """``local up`` starts the nodes only once every role reads what it is granted (the
    brokers apply new ACLs a moment after the controller commits them); a topic a role is
    not granted stays refused: the wait retries it to its deadline, then says which."""
    wait_granted(sasl_stack.settings(), sasl_stack.role_settings, 60)
    with pytest.raises(LogError, match=r"deadletter\[0\] as this user.*still failing"):
        wait_readable(sasl_stack.role_settings("peer"), {"deadletter": [0]}, timeout=3)


def test_the_wait_ends_when_a_grant_comes_after_its_first_refusal(
        sasl_stack: LocalStack) -> None:
    """A client whose first metadata did not show a topic (not granted yet) keeps it unknown
    until its next periodic refresh, minutes later: the wait retries each refusal with a new
    client, so a grant made while it waits ends it (a stack start once failed on this)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    operator = sasl_stack.settings()
    topic = operator.topic("deadletter")  # the peer user may not even describe it
    spec = [(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:peer", "*", op,
             AclPermissionType.ALLOW) for op in (AclOperation.DESCRIBE, AclOperation.READ)]
    refused, errors = threading.Event(), []

    def wait() -> None:
        try:
            wait_readable(sasl_stack.role_settings("peer"), {"deadletter": [0]}, timeout=60,
                          on_refused=lambda text: refused.set())
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    admin = AdminClient(operator.admin_config())
    try:
        assert refused.wait(30), "the wait was never refused"
        for future in admin.create_acls([AclBinding(*b) for b in spec]).values():
            future.result(30)
        waiter.join(70)
        assert not waiter.is_alive() and errors == [], errors
    finally:
        for future in admin.delete_acls([AclBindingFilter(*b) for b in spec]).values():
            future.result(30)
        waiter.join(70)


def test_an_unknown_role_is_one_clear_error(sasl_stack: LocalStack) -> None:
    with pytest.raises(ConfigError, match="TIDEMARK_STACK_ROLE=admin: .* no such Kafka user"):
        _as(sasl_stack, "admin")


def test_peers_on_the_peer_user_deliver_once(sasl_stack: LocalStack, tmp_path: Path) -> None:
    settings = _as(sasl_stack, "peer")
    handled: list[int] = []
    done = threading.Event()
    b = Peer("B", None, settings)

    @b.handler
    def on_job(msg: Job) -> None:
        handled.append(msg.n)
        if len(handled) == 20:
            done.set()

    b.start()
    a = Peer("A", None, settings).start()
    try:
        for n in range(20):
            a.post("B", Job(n))
        a.flush(30)
        assert _append(settings, "config") is not None  # refused meanwhile
        assert done.wait(60), f"handled {len(handled)} of 20"
    finally:
        a.stop()
        b.stop()
    assert sorted(handled) == list(range(20))
