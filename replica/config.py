"""The cluster TOML: Kafka settings (the shared ``[kafka]`` table, read by
:func:`tidemark.log.settings.load_settings`), node addresses, data folder, gossip and release
policy.

```toml
[kafka]                      # exactly the table every Tidemark component reads
bootstrap = "127.0.0.1:9092"

[cluster]
data_dir = "replicas"        # relative to this file; each node uses data_dir/<node id>
gossip_interval_ms = 500
gossip_push_ms = 100         # push state this soon after applying records (0: timer only)
watch_gap_ms = 20            # a Watch stream sends at most one message this often (0: each move)
metrics_host = "127.0.0.1"   # optional; default TIDEMARK_METRICS_HOST, else 127.0.0.1
secret = "..."               # optional; signs gossip, status and backfill calls (HMAC)
[[cluster.partitions]]
name = "p0"
replicas = ["p0r0", "p0r1"]
log_partitions = [0, 2]      # optional; default: k mod N == i

[nodes.p0r0]
address = "127.0.0.1:7101"
metrics_port = 7102          # optional; 0 = any free port

[release]
min_age_ms = 0               # messages younger than this are kept
retain_bytes = 0             # size rule: keep at least this much data per partition
gc_interval_ms = 2000
sweep_interval_ms = 5000     # Sends not acked when GC met them are re-checked at most this often
ack_window_ms = 86400000     # an Ack's index entry outlives it this long (late duplicate Sends)

[store]                      # LevelDB memory bounds (see replica.store.StoreOptions)
cache_mb = 32
write_buffer_mb = 16
open_tables = 64
table_file_mb = 2
bloom_bits = 10              # bloom filter bits per key; 0 = none
snappy = 0                   # 1 = snappy-compress table blocks
```
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tidemark.gossip.service import register_cluster_secret
from tidemark.log import registry
from tidemark.log.settings import Settings, load_settings, read_toml
from tidemark.replica.exceptions import ClusterConfigError
from tidemark.replica.store import StoreOptions

__all__ = ["NodeSpec", "PartitionSpec", "ReleasePolicy", "ClusterFile", "load_cluster_file",
           "render_cluster_file"]

#: The smallest value of each [store] key (1 for the others).
_STORE_MINIMUM = {"open_tables": 64, "bloom_bits": 0, "snappy": 0}


@dataclass(frozen=True)
class NodeSpec:
    """A node named in the TOML."""

    node_id: str
    address: str
    metrics_port: int = 0


@dataclass(frozen=True)
class PartitionSpec:
    """A replica partition: the log partitions it owns and its replicas."""

    name: str
    log_partitions: tuple[int, ...]
    replicas: tuple[str, ...]


@dataclass(frozen=True)
class ReleasePolicy:
    """What GC may drop below the GC point (every rule must allow it)."""

    min_age_ms: int = 0
    retain_bytes: int = 0
    gc_interval_ms: int = 2000
    ack_window_ms: int = 24 * 3600 * 1000  # how long an Ack still matches a later Send copy
    #: pending Sends (not acked or purged when GC met them) are read again at most this often
    sweep_interval_ms: int = 5000


@dataclass(frozen=True)
class ClusterFile:
    """A parsed cluster TOML."""

    path: Path
    settings: Settings
    data_dir: Path
    nodes: dict[str, NodeSpec]
    partitions: list[PartitionSpec]
    gossip_interval_ms: int = 500
    #: After applying records a node pushes its state to the others at once, at most every
    #: ``gossip_push_ms`` (0: only every ``gossip_interval_ms``), so the stable cut follows
    #: the log within tens of milliseconds instead of a gossip period.
    gossip_push_ms: int = 100
    #: A ``Watch`` stream (the peers' ``quorum``/``all`` waits) sends at most one message
    #: every ``watch_gap_ms``, carrying every end that moved since its last (0: one per move).
    watch_gap_ms: int = 20
    down_after_ms: int = 3000
    sync_writes: bool = False
    metrics_host: str = "127.0.0.1"
    secret: str = ""  # the cluster secret node-to-node calls are signed with ("" = none)
    release: ReleasePolicy = field(default_factory=ReleasePolicy)
    store: StoreOptions = field(default_factory=StoreOptions)


def _int(table: Mapping[str, Any], key: str, default: int, where: str, minimum: int = 0) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ClusterConfigError(f"{where}.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _address(value: Any, where: str) -> str:
    if not isinstance(value, str) or ":" not in value:
        raise ClusterConfigError(f"{where}.address must be \"HOST:PORT\", got {value!r}")
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterConfigError(f"{where}.address must be \"HOST:PORT\", got {value!r}")
    return value


def _metrics_host(cluster: Mapping[str, Any], env: Mapping[str, str] | None) -> str:
    """``TIDEMARK_METRICS_HOST`` wins over ``[cluster] metrics_host`` (env over file)."""
    spec = registry.setting("metrics_host")
    if (os.environ if env is None else env).get(spec.env):
        return str(registry.env_value("metrics_host", env))
    return str(cluster.get("metrics_host") or spec.default)


def load_cluster_file(path: str | os.PathLike[str],
                      env: Mapping[str, str] | None = None) -> ClusterFile:
    """Parse and validate a cluster TOML; raises :class:`ClusterConfigError` (one line)."""
    path = Path(path)
    doc = read_toml(path)
    settings = load_settings(path=path, env=env)
    cluster = doc.get("cluster")
    if not isinstance(cluster, dict):
        raise ClusterConfigError(f"{path}: missing [cluster] table")
    unknown = set(cluster) - {"data_dir", "gossip_interval_ms", "gossip_push_ms", "partitions",
                              "watch_gap_ms", "down_after_ms", "sync_writes", "metrics_host",
                              "secret"}
    if unknown:
        raise ClusterConfigError(f"{path}: unknown key cluster.{sorted(unknown)[0]}")
    nodes_doc = doc.get("nodes", {})
    if not isinstance(nodes_doc, dict) or not nodes_doc:
        raise ClusterConfigError(f"{path}: no [nodes.<id>] tables")
    nodes = {}
    for node_id, table in nodes_doc.items():
        where = f"{path}: nodes.{node_id}"
        if not isinstance(table, dict):
            raise ClusterConfigError(f"{where} must be a table")
        nodes[node_id] = NodeSpec(node_id, _address(table.get("address"), where),
                                  _int(table, "metrics_port", 0, where))
    parts_doc = cluster.get("partitions")
    if not isinstance(parts_doc, list) or not parts_doc:
        raise ClusterConfigError(f"{path}: no [[cluster.partitions]] entries")
    count = len(parts_doc)
    partitions, seen = [], set()
    for i, table in enumerate(parts_doc):
        where = f"{path}: cluster.partitions[{i}]"
        replicas = table.get("replicas")
        if not isinstance(replicas, list) or not replicas:
            raise ClusterConfigError(f"{where}.replicas must be a non-empty list of node ids")
        for r in replicas:
            if r not in nodes:
                raise ClusterConfigError(f"{where}: replica {r!r} has no [nodes.{r}] table")
            if r in seen:
                raise ClusterConfigError(f"{where}: node {r!r} is listed twice")
            seen.add(r)
        logs = table.get("log_partitions",
                         [k for k in range(settings.partitions) if k % count == i])
        if not isinstance(logs, list) or not all(isinstance(k, int) for k in logs):
            raise ClusterConfigError(f"{where}.log_partitions must be a list of integers")
        partitions.append(PartitionSpec(str(table.get("name", f"p{i}")), tuple(logs),
                                        tuple(replicas)))
    covered = sorted(k for p in partitions for k in p.log_partitions)
    if covered != list(range(settings.partitions)):
        raise ClusterConfigError(f"{path}: log partitions {covered} must cover 0.."
                                 f"{settings.partitions - 1} exactly once")
    release_doc = doc.get("release", {})
    defaults = ReleasePolicy()  # each key's default is the ReleasePolicy field's
    release = ReleasePolicy(**{
        f.name: _int(release_doc, f.name, getattr(defaults, f.name), f"{path}: release",
                     10 if f.name == "gc_interval_ms" else 0)
        for f in fields(ReleasePolicy)})
    store_doc = doc.get("store", {})
    if not isinstance(store_doc, dict):
        raise ClusterConfigError(f"{path}: [store] must be a table")
    unknown = set(store_doc) - {f.name for f in fields(StoreOptions)}
    if unknown:
        raise ClusterConfigError(f"{path}: unknown key store.{sorted(unknown)[0]}")
    store_defaults = StoreOptions()  # each key's default is the StoreOptions field's
    store = StoreOptions(**{
        f.name: _int(store_doc, f.name, getattr(store_defaults, f.name), f"{path}: store",
                     _STORE_MINIMUM.get(f.name, 1))
        for f in fields(StoreOptions)})
    secret = cluster.get("secret", "")
    if not isinstance(secret, str):
        raise ClusterConfigError(f"{path}: cluster.secret must be a string")
    # A process that read the cluster's file is in the cluster: its calls to these nodes
    # are signed (the CLI's `replica status`, tests).
    register_cluster_secret((n.address for n in nodes.values()), secret)
    data_dir = Path(str(cluster.get("data_dir", "replicas")))
    if not data_dir.is_absolute():
        data_dir = path.resolve().parent / data_dir
    return ClusterFile(path=path, settings=settings, data_dir=data_dir, nodes=nodes,
                       partitions=partitions,
                       gossip_interval_ms=_int(cluster, "gossip_interval_ms", 500,
                                               f"{path}: cluster", 10),
                       gossip_push_ms=_int(cluster, "gossip_push_ms", 100, f"{path}: cluster", 0),
                       watch_gap_ms=_int(cluster, "watch_gap_ms", 20, f"{path}: cluster", 0),
                       down_after_ms=_int(cluster, "down_after_ms", 3000, f"{path}: cluster", 10),
                       sync_writes=bool(cluster.get("sync_writes", False)), release=release,
                       metrics_host=_metrics_host(cluster, env), secret=secret,
                       store=store)


def render_cluster_file(kafka: Mapping[str, Any], data_dir: str,
                        partitions: list[PartitionSpec], nodes: list[NodeSpec],
                        gossip_interval_ms: int = 500, extra: str = "",
                        secret: str = "") -> str:
    """TOML text for a cluster (used by the local stack and tests)."""
    def q(v: Any) -> str:
        return f'"{v}"' if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
    lines = ["[kafka]"] + [f"{k} = {q(v)}" for k, v in kafka.items()]
    lines += ["", "[cluster]", f"data_dir = {q(data_dir)}",
              f"gossip_interval_ms = {gossip_interval_ms}"]
    if secret:
        lines.append(f"secret = {q(secret)}")
    for p in partitions:
        lines += ["", "[[cluster.partitions]]", f"name = {q(p.name)}",
                  f"log_partitions = {list(p.log_partitions)}",
                  "replicas = [" + ", ".join(q(r) for r in p.replicas) + "]"]
    for n in nodes:
        lines += ["", f"[nodes.{n.node_id}]", f"address = {q(n.address)}",
                  f"metrics_port = {n.metrics_port}"]
    return "\n".join(lines) + "\n" + extra
