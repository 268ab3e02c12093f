"""Fixtures shared by the integration tests of this folder: a topic set of the module's own
on the session's cluster, and the Spark queues job on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests import cluster
from tidemark.log.settings import Settings
from tidemark.log.topics import delete_topic_set, ensure_topics
from tidemark.stack.queues_job import JobProcess


@pytest.fixture(scope="module")
def settings(request: pytest.FixtureRequest, bootstrap: str) -> Iterator[Settings]:
    """Settings of a fresh topic set for the module, deleted afterwards: the prefix starts
    with the module's ``TOPIC_LETTER`` (default ``t``), ``PARTITIONS`` partitions (default
    4)."""
    letter = getattr(request.module, "TOPIC_LETTER", "t")
    s = cluster.settings(bootstrap=bootstrap, topic_prefix=f"{letter}{uuid.uuid4().hex[:8]}.",
                         partitions=getattr(request.module, "PARTITIONS", 4))
    ensure_topics(s)
    yield s
    delete_topic_set(s)


@pytest.fixture(scope="module")
def job(request: pytest.FixtureRequest, settings: Settings,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobProcess]:
    """The Spark queues job on :func:`settings`' topics for the module, with the module's
    ``JOB_ENV`` variables; stopped afterwards."""
    folder = tmp_path_factory.mktemp("spark-job")
    proc = JobProcess(settings, folder / "checkpoint", folder / "job.log")
    proc.env.update(getattr(request.module, "JOB_ENV", {}))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
