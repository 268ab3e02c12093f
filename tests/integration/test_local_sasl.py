"""`tidemark local up --sasl`: a real broker whose only client listener is SASL_PLAINTEXT
SCRAM-SHA-256 (credentials added at storage format time). The CLI's `load`, the project's
librdkafka consumer and a replica node work through it with the stack's credentials; a
client without credentials, or with a wrong password, is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.replicas import ends, status, txlog_ust
from tests.support import wait_for
from tidemark.log.consumer import read_to_end
from tidemark.stack.launcher import LocalStack

pytestmark = pytest.mark.integration
_ENV = {"TIDEMARK_REPLICATION_FACTOR": "1", "TIDEMARK_MIN_INSYNC_REPLICAS": "1",
        "TIDEMARK_PARTITIONS": "2"}


def tidemark(*args: str, state: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TIDEMARK_BOOTSTRAP"}
    env.update(_ENV, TIDEMARK_STATE_DIR=str(state))
    proc = subprocess.run([sys.executable, "-m", "tidemark", *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def sasl_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    state = tmp_path_factory.mktemp("sasl") / "state"
    saved = {k: os.environ.get(k) for k in [*_ENV, "TIDEMARK_BOOTSTRAP"]}
    os.environ.pop("TIDEMARK_BOOTSTRAP", None)
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
    assert client["sasl.mechanism"] == "SCRAM-SHA-256" and client["sasl.username"] == "tidemark"
    props = (sasl_stack.state_dir / "broker-1" / "server.properties").read_text()
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
