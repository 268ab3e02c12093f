"""Replica nodes of the local stack: ``tidemark local up --replicas PxR``.

``plan`` writes ``cluster.toml`` into the stack's state folder (once; later calls reuse it so
addresses stay stable) and returns one ProcessSpec per node, named by node id (``p0r0`` ...),
that runs ``tidemark replica run`` and is ready when its gRPC port accepts connections.
The cluster secret in that file also signs the peers' tokens (:func:`peer_token`).
"""

from __future__ import annotations

import re
import secrets
import sys
from pathlib import Path

from tidemark.gossip.peer_auth import LOCAL_CLUSTER_FILE, issue_token
from tidemark.gossip.pki import write_private
from tidemark.replica.config import NodeSpec, PartitionSpec, load_cluster_file, render_cluster_file
from tidemark.replica.exceptions import ClusterConfigError
from tidemark.stack.launcher import LocalStack, ProcessSpec
from tidemark.stack.processes import free_ports

__all__ = ["plan", "parse_layout", "write_cluster_file", "CONFIG_NAME", "peer_token",
           "peer_env"]

CONFIG_NAME = LOCAL_CLUSTER_FILE


def parse_layout(layout: str) -> tuple[int, int]:
    """``"2x2"`` -> (replica partitions, replicas per partition)."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", layout or "")
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ClusterConfigError(f"replica layout must look like 2x2 (PxR), got {layout!r}")
    return int(m.group(1)), int(m.group(2))


def write_cluster_file(path: Path, kafka: dict, layout: str, log_partitions: int,
                       gossip_interval_ms: int = 500, extra: str = "") -> Path:
    """Write a cluster TOML for ``layout`` with free loopback ports and a random cluster
    secret (gossip, status and backfill calls are signed with it)."""
    n_parts, n_reps = parse_layout(layout)
    if n_parts > log_partitions:
        raise ClusterConfigError(f"{n_parts} replica partitions need at least as many log "
                                 f"partitions (have {log_partitions})")
    ids = [f"p{i}r{j}" for i in range(n_parts) for j in range(n_reps)]
    ports = free_ports(2 * len(ids))
    nodes = [NodeSpec(n, f"127.0.0.1:{ports[2 * i]}", ports[2 * i + 1]) for i, n in enumerate(ids)]
    parts = [PartitionSpec(f"p{i}", tuple(k for k in range(log_partitions) if k % n_parts == i),
                           tuple(f"p{i}r{j}" for j in range(n_reps))) for i in range(n_parts)]
    write_private(path, render_cluster_file(kafka, "replicas", parts, nodes, gossip_interval_ms,
                                            extra, secret=secrets.token_hex(32)).encode())
    return path


def plan(stack: LocalStack, layout: str) -> list[ProcessSpec]:
    """ProcessSpecs for the replica nodes of ``layout`` on ``stack``."""
    path = stack.state_dir / CONFIG_NAME
    if not path.exists():
        s = stack.settings()
        write_cluster_file(path, {"bootstrap": s.bootstrap, "topic_prefix": s.topic_prefix,
                                  "partitions": s.partitions}, layout, s.partitions)
    cf = load_cluster_file(path)
    wanted = {f"p{i}r{j}" for i in range(parse_layout(layout)[0])
              for j in range(parse_layout(layout)[1])}
    if wanted != set(cf.nodes):
        raise ClusterConfigError(f"{path} was written for another layout "
                                 f"({len(cf.nodes)} nodes); run `tidemark local down` and "
                                 f"remove it to change the layout")
    return [ProcessSpec(name=n.node_id, kind="replica",
                        argv=[sys.executable, "-m", "tidemark", "replica", "run",
                              "--config", str(path), "--node", n.node_id],
                        address=n.address, ready_port=int(n.address.rsplit(":", 1)[1]))
            for n in cf.nodes.values()]


def peer_token(cluster_path: Path, peer: str, environment: str,
               ttl_ms: int | None = None) -> str:
    """A token for ``peer`` of ``environment`` issued with the secret of the cluster file at
    ``cluster_path`` (the local stack's: ``STATE_DIR/cluster.toml``). Raises
    :class:`ClusterConfigError` if the file has no secret (its nodes then ask for none)."""
    cf = load_cluster_file(cluster_path)
    if not cf.secret:
        raise ClusterConfigError(f"{cluster_path} has no [cluster] secret: its nodes do not "
                                 "check peer tokens")
    return issue_token(cf.secret, environment, peer, ttl_ms)


def peer_env(stack: LocalStack, peer: str, environment: str) -> dict[str, str]:
    """The environment variables a peer process of ``stack`` needs to replay as ``peer``."""
    return {"TIDEMARK_PEER_TOKEN": peer_token(stack.state_dir / CONFIG_NAME, peer,
                                              environment)}
