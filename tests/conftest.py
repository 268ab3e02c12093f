"""Shared fixtures: a real local Kafka cluster (or an existing one), fresh topic sets, replica
nodes with the queues job.

``TIDEMARK_BOOTSTRAP`` names an existing cluster to use instead of starting one (the
confluent-kafka-python fixture pattern). Otherwise one 3-broker KRaft cluster is started for
the whole session by the project's own launcher in a temporary state folder and stopped at
the end. Tests that kill brokers use ``private_stack`` instead so they never disturb others.

Every gRPC channel is mutual TLS, as in production: the session has one certificate authority
(``TIDEMARK_TLS_ISSUER``), from which each peer, node and CLI process of the tests issues itself
a certificate of its own identity.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import cluster
from tests.support import PeerScript
from tidemark.gossip.pki import init_ca
from tidemark.log.settings import Settings
from tidemark.log.topics import ensure_topics
from tidemark.stack.launcher import LocalStack
from tidemark.stack.queues_job import JobProcess


@pytest.fixture(scope="session", autouse=True)
def tls_issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's CA; every process the tests start inherits it."""
    folder = tmp_path_factory.mktemp("tls") / "pki"
    init_ca(folder, name="tidemark tests")
    saved = {k: os.environ.pop(k, None) for k in ("TIDEMARK_INSECURE", "TIDEMARK_TLS_ISSUER")}
    os.environ["TIDEMARK_TLS_ISSUER"] = str(folder)
    try:
        yield folder
    finally:
        os.environ.pop("TIDEMARK_TLS_ISSUER", None)
        for key, value in saved.items():
            if value is not None:
                os.environ[key] = value


@pytest.fixture(scope="session")
def kafka_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The session's cluster: started by the launcher as ``tidemark local up --sasl`` does
    (SCRAM users per role, ACLs; :mod:`tests.cluster`), or the one in TIDEMARK_BOOTSTRAP."""
    stack = LocalStack(tmp_path_factory.mktemp("stack"))
    try:
        stack.up(brokers=3, sasl=not os.environ.get("TIDEMARK_BOOTSTRAP"))
        cluster.use_roles(stack.state.get("roles", {}))
        with cluster.signed_in():
            yield stack
    finally:
        cluster.use_roles({})
        stack.down()


@pytest.fixture(scope="session")
def bootstrap(kafka_stack: LocalStack) -> str:
    """Bootstrap servers of the session cluster."""
    return kafka_stack.state["bootstrap"]


@pytest.fixture
def fresh_settings(bootstrap: str) -> Settings:
    """Settings with a unique topic prefix whose five topics exist (4 partitions each)."""
    settings = cluster.settings(bootstrap=bootstrap,
                                topic_prefix=f"t{uuid.uuid4().hex[:10]}.", partitions=4)
    ensure_topics(settings)
    return settings


@pytest.fixture(scope="module")
def replicas_job(request: pytest.FixtureRequest, bootstrap: str,
                 tmp_path_factory: pytest.TempPathFactory,
                 ) -> Iterator[tuple[LocalStack, JobProcess]]:
    """The module's replica nodes (2x2) and Spark queues job on a fresh topic set of the
    session's cluster (:func:`tests.replicas.replicas_and_job`); the job gets the module's
    ``JOB_ENV`` variables, if it has any."""
    from tests.replicas import replicas_and_job  # grpc and the replica extra: only here
    folder = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with replicas_and_job(bootstrap, folder, env=getattr(request.module, "JOB_ENV", None)
                          ) as (stack, job):
        yield stack, job


@pytest.fixture
def private_stack(tmp_path: Path) -> Iterator[LocalStack]:
    """A cluster of this test's own, for fault drills that kill brokers."""
    if os.environ.get("TIDEMARK_BOOTSTRAP"):
        pytest.skip("fault drills need a cluster the tests start themselves")
    with cluster.elsewhere():
        stack = LocalStack(tmp_path / "stack")
        try:
            stack.up(brokers=3)
            yield stack
        finally:
            stack.down(grace_s=5.0)  # a broker without its quorum never finishes a clean stop


@pytest.fixture
def peer_scripts(tmp_path: Path) -> Iterator[Callable[..., PeerScript]]:
    """``start(stack, peer_id, script, *args)``: a :class:`~tests.support.PeerScript`;
    the ones still running at the end of the test are SIGKILLed."""
    started: list[PeerScript] = []

    def start(stack: LocalStack, peer_id: str, script: str, *args: str,
              host: Any = None) -> PeerScript:
        started.append(PeerScript(stack, peer_id, script, list(args), tmp_path, host))
        return started[-1]
    yield start
    for proc in started:
        proc.sigkill()
