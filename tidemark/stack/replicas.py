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
import time
from collections.abc import Callable
from pathlib import Path

from tidemark.gossip.peer_auth import LOCAL_CLUSTER_FILE, issue_token
from tidemark.gossip.pki import Identity, write_private
from tidemark.log import registry
from tidemark.replica.config import NodeSpec, PartitionSpec, load_cluster_file, render_cluster_file
from tidemark.replica.exceptions import ClusterConfigError
from tidemark.stack.launcher import LocalStack, ProcessSpec
from tidemark.stack.processes import free_ports, terminate

__all__ = ["plan", "parse_layout", "write_cluster_file", "CONFIG_NAME", "peer_token",
           "peer_env", "ReplicaModes", "insecure_env", "serve_tls"]

CONFIG_NAME = LOCAL_CLUSTER_FILE


def parse_layout(layout: str) -> tuple[int, int]:
    """``"2x2"`` -> (replica partitions, replicas per partition)."""
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", layout or "")
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ClusterConfigError(f"replica layout must look like 2x2 (PxR), got {layout!r}")
    return int(m.group(1)), int(m.group(2))


def write_cluster_file(path: Path, kafka: dict, layout: str, log_partitions: int,
                       gossip_interval_ms: int = 500, extra: str = "",
                       address_of: Callable[[str], str] = lambda node: "127.0.0.1") -> Path:
    """Write a cluster TOML for ``layout`` with free ports (each node on ``address_of(id)``,
    loopback by default) and a random cluster secret (gossip, status and backfill calls are
    signed with it)."""
    n_parts, n_reps = parse_layout(layout)
    if n_parts > log_partitions:
        raise ClusterConfigError(f"{n_parts} replica partitions need at least as many log "
                                 f"partitions (have {log_partitions})")
    ids = [f"p{i}r{j}" for i in range(n_parts) for j in range(n_reps)]
    ports = free_ports(2 * len(ids))
    nodes = [NodeSpec(n, f"{address_of(n)}:{ports[2 * i]}", ports[2 * i + 1])
             for i, n in enumerate(ids)]
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
                                  "partitions": s.partitions}, layout, s.partitions,
                           address_of=lambda node: stack.host_address(stack.place(node)))
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
                        address=n.address, ready_port=int(n.address.rsplit(":", 1)[1]),
                        host=stack.place(n.node_id))
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


def insecure_env(env: dict[str, str], insecure: bool) -> dict[str, str]:
    """A replica process's extra variables ``env`` with ``TIDEMARK_INSECURE=1`` (``insecure``)
    or without it (its own TLS material again), the rest unchanged (pure)."""
    name = registry.setting("insecure").env
    out = {k: v for k, v in env.items() if k != name}
    if insecure:
        out[name] = "1"
    return out


def serve_tls(stack: LocalStack, timeout: float = 5.0) -> dict[str, bool]:
    """Per replica node of ``stack``: whether a mutual-TLS client (an operator certificate
    from the stack's CA or the process's TLS settings) can call its ``Status``."""
    import grpc

    from tidemark.gossip.service import ReplicaClient
    from tidemark.gossip.tls import resolve_transport
    client = ReplicaClient(transport=resolve_transport(Identity("operator", "bench"),
                                                       insecure=False,
                                                       state_dir=stack.state_dir))
    out = {}
    try:
        for spec in stack.processes("replica"):
            try:
                client.call(spec.address, "Status", b"", timeout=timeout)
                out[spec.name] = True
            except grpc.RpcError:
                out[spec.name] = False
    finally:
        client.close()
    return out


class ReplicaModes:
    """Switches every replica node of a local stack between mutual TLS (their default) and
    plaintext (``TIDEMARK_INSECURE=1``): stops them all (SIGTERM) and starts them again with
    the same stores, ports and command lines, recorded in ``state.json`` as they now run.
    All at once, because a TLS node and a plaintext one cannot gossip. Used as a context
    manager, the nodes are back on TLS at the end, whatever happened."""

    def __init__(self, stack: LocalStack, timeout_s: float = 120.0) -> None:
        if not stack.processes("replica"):
            raise ClusterConfigError(f"no replica node recorded in {stack.state_dir}")
        if registry.env_value("insecure"):
            raise ClusterConfigError("TIDEMARK_INSECURE is set in this process: its nodes"
                                     " and peers could not be measured with TLS")
        self.stack, self.timeout_s = stack, timeout_s
        self.insecure = any(registry.setting("insecure").env in s.env
                            for s in stack.processes("replica"))
        self.restarts_s: list[float] = []

    def set(self, insecure: bool) -> float:
        """Nodes serving plaintext (``insecure``) or TLS; restarts them only if they serve
        the other way now. Returns the seconds it took (0 when nothing changed)."""
        if insecure == self.insecure:
            return 0.0
        t0 = time.monotonic()
        specs = self.stack.processes("replica")
        terminate([s.pid for s in specs if s.pid], self.stack.marker)
        for spec in specs:
            spec.env, spec.pid = insecure_env(spec.env, insecure), None
            self.stack.ensure(spec, self.timeout_s, wait=False)
        deadline = time.monotonic() + self.timeout_s
        for spec in self.stack.processes("replica"):
            self.stack.wait_ready(spec, deadline)
        self.insecure = insecure
        self.restarts_s.append(round(time.monotonic() - t0, 2))
        return self.restarts_s[-1]

    def __enter__(self) -> "ReplicaModes":
        return self

    def __exit__(self, *exc: object) -> None:
        self.set(False)
