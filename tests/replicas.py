"""Helpers for the replica integration and fault tests: a local stack of real node processes
on the session's Kafka cluster, under a unique topic prefix."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from tests import cluster
from tests.support import generate_load, wait_for
from tidemark.gossip.cluster_config import ConfigLog, Epoch
from tidemark.gossip.service import ReplicaClient as Peers
from tidemark.log.offsets import end_offsets
from tidemark.log.settings import Settings
from tidemark.log.topics import delete_topic_set
from tidemark.replica.config import load_cluster_file
from tidemark.stack.launcher import LocalStack
from tidemark.stack.replicas import CONFIG_NAME, plan, write_cluster_file

__all__ = ["replicas_and_job", "replica_stack", "status", "current_epoch", "ends",
           "load_to_cut", "txlog_ust"]

_VARS = ("TIDEMARK_BOOTSTRAP", "TIDEMARK_TOPIC_PREFIX", "TIDEMARK_PARTITIONS")


@contextmanager
def replicas_and_job(bootstrap: str, folder: Path, layout: str = "2x2",
                     env: dict[str, str] | None = None) -> Iterator[tuple[LocalStack, Any]]:
    """:func:`replica_stack` plus the Spark queues job on its topics (checkpoint and log in
    ``folder``), stopped afterwards; ``env``: extra variables for the job."""
    from tidemark.stack.queues_job import JobProcess
    with replica_stack(bootstrap, folder / "stack", layout) as stack:
        job = JobProcess(stack.settings(), folder / "checkpoint", folder / "job.log")
        job.env.update(env or {})
        job.start()
        try:
            yield stack, job
        finally:
            job.stop()


@contextmanager
def replica_stack(bootstrap: str, folder: Path, layout: str, min_age_ms: int = 0,
                  gossip_ms: int = 200) -> Iterator[LocalStack]:
    """A LocalStack on the existing cluster with replica nodes of ``layout`` running."""
    saved = {v: os.environ.get(v) for v in _VARS}
    os.environ.update({"TIDEMARK_BOOTSTRAP": bootstrap, "TIDEMARK_PARTITIONS": "4",
                       "TIDEMARK_TOPIC_PREFIX": f"h3t{uuid.uuid4().hex[:8]}."})
    stack = LocalStack(folder)
    stack.state.update(cluster.external_state(bootstrap))  # nodes sign in as `replica`
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_cluster_file(folder / CONFIG_NAME,
                           {"bootstrap": bootstrap,
                            "topic_prefix": os.environ["TIDEMARK_TOPIC_PREFIX"],
                            "partitions": 4}, layout, 4, gossip_ms,
                           f"\n[release]\ngc_interval_ms = 500\nmin_age_ms = {min_age_ms}\n")
        stack.up(extra=[lambda s: plan(s, layout)], timeout_s=60)
        yield stack
    finally:
        LocalStack(folder).down(grace_s=5)  # re-read: CLI calls may have restarted nodes
        delete_topic_set(cluster.settings(bootstrap=bootstrap, partitions=4,
                                          topic_prefix=os.environ["TIDEMARK_TOPIC_PREFIX"]))
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def status(stack: LocalStack, node: str | None = None) -> dict | None:
    """A node's status document (the first answering node if ``node`` is None)."""
    cf = load_cluster_file(stack.state_dir / CONFIG_NAME)
    peers = Peers()
    try:
        for spec in cf.nodes.values():
            if node is not None and spec.node_id != node:
                continue
            try:
                return json.loads(peers.call(spec.address, "Status", b"", timeout=3))
            except grpc.RpcError:
                continue
        return None
    finally:
        peers.close()


def current_epoch(settings: Settings) -> Epoch:
    """The cluster's current epoch, read from the config topic (the test fails without one)."""
    log = ConfigLog(settings)
    try:
        epoch = log.read_to_end()
    finally:
        log.close()
    assert epoch is not None
    return epoch


def ends(stack: LocalStack) -> dict[str, int]:
    """``{"txlog/k": high watermark}``."""
    return {f"txlog/{k}": o for k, o in end_offsets(stack.settings(), "txlog").items()}


def load_to_cut(stack: LocalStack, messages: int, seed: int, peers: int = 30) -> dict[str, int]:
    """Write ``messages`` of load, then wait until the cut (the first answering node's txlog
    UST) is at txlog's ends; returns those ends (:func:`ends`)."""
    generate_load(stack.settings(), peers=peers, messages=messages, seed=seed)
    target = ends(stack)
    wait_for(lambda: txlog_ust(status(stack)) == target, 60, what="cut at the ends")
    return target


def txlog_ust(doc: dict | None) -> dict[str, int]:
    """The txlog part of a status document's UST."""
    return {tp: o for tp, o in (doc or {}).get("ust", {}).items() if tp.startswith("txlog/")}
