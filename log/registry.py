"""Every Tidemark setting, declared once: its name, environment variable, type, default, help.

The CLI takes each flag's fallback from here at parse time, components read environment
values through :func:`env_value`, the console checks every ``TIDEMARK_*`` variable with
:func:`check_environment` before running a command, and docs/cli.md's configuration table is
:func:`markdown_table` (a test keeps the two equal). Kafka client settings are not listed one
by one: ``TIDEMARK_KAFKA_<NAME>`` passes ``<name>`` (``_`` for ``.``) to every client.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.log.exceptions import ConfigError

__all__ = ["Setting", "SETTINGS", "setting", "parse", "env_value", "check_environment",
           "markdown_table", "parse_duration_ms", "KAFKA_CLIENT_PREFIX", "client_env"]

#: ``TIDEMARK_KAFKA_SASL_USERNAME=x`` passes ``sasl.username=x`` to every Kafka client.
KAFKA_CLIENT_PREFIX = "TIDEMARK_KAFKA_"


def client_env(client: Mapping[str, str]) -> dict[str, str]:
    """Kafka client settings (``sasl.username``...) as the ``TIDEMARK_KAFKA_*`` variables
    that ``load_settings`` reads back (``TIDEMARK_KAFKA_SASL_USERNAME``...)."""
    return {KAFKA_CLIENT_PREFIX + k.upper().replace(".", "_"): v for k, v in client.items()}

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``2s``, ``15m``, ``24h``, ``7d`` or plain milliseconds -> milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h|d)?\s*", str(text))
    if not match:
        raise ValueError(f"bad duration {text!r}: use e.g. 500ms, 2s, 15m, 24h")
    return int(match.group(1)) * _UNITS_MS[match.group(2) or "ms"]


def _int(text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise ValueError(f"must be an integer, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise ValueError(f"must be positive, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise ValueError(f"must be >= 0, got {text!r}")
    return value


def _bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def _log_level(text: str) -> str:
    level = str(text).strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {text!r}")
    return level


def _layout(text: str) -> str:
    if not re.fullmatch(r"\s*[1-9]\d*\s*[xX]\s*[1-9]\d*\s*", str(text)):
        raise ValueError(f"must look like 2x2 (partitions x replicas), got {text!r}")
    return str(text).strip()


def _signed_int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ValueError(f"must be a whole number (may be negative), got {text!r}") from None


def _address(text: str) -> str:
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be HOST:PORT, got {text!r}")
    return str(text)


_KINDS: dict[str, Callable[[str], Any]] = {
    "str": str, "path": str, "int": _positive_int, "int0": _non_negative_int,
    "signed": _signed_int,
    "duration": parse_duration_ms, "bool": _bool, "level": _log_level, "layout": _layout,
    "address": _address,
}


@dataclass(frozen=True)
class Setting:
    """One setting: ``name`` (also its ``Settings`` field or flag), env variable, kind."""

    name: str
    env: str
    kind: str
    default: Any
    help: str
    #: inclusive (low, high) for a number that is refused outside them (None: no bound)
    bounds: tuple[int, int] | None = None

    def parse(self, text: str) -> Any:
        """The typed value of ``text``; raises :class:`ConfigError` naming the variable
        (also for a number outside ``bounds``)."""
        try:
            value = _KINDS[self.kind](text)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.env}: {exc}") from None
        if self.bounds is not None and not self.bounds[0] <= value <= self.bounds[1]:
            raise ConfigError(f"{self.env}={text}: must be between {self.bounds[0]} and"
                              f" {self.bounds[1]}")
        return value


SETTINGS: tuple[Setting, ...] = (
    # where things are
    Setting("config", "TIDEMARK_CONFIG", "path", None,
            "TOML file: [kafka], [peer] and, for replica nodes, the cluster tables"),
    Setting("state_dir", "TIDEMARK_STATE_DIR", "path", ".tidemark",
            "local stack state folder (pids, ports, logs, data)"),
    Setting("cache", "TIDEMARK_CACHE", "path", "~/.cache/tidemark",
            "where Maven-resolved jars are kept"),
    Setting("log_level", "TIDEMARK_LOG_LEVEL", "level", "WARNING", "logging level"),
    Setting("progress", "TIDEMARK_PROGRESS", "bool", False,
            "show progress lines even when stderr is not a terminal"),
    # Kafka ([kafka] table)
    Setting("bootstrap", "TIDEMARK_BOOTSTRAP", "str", "",
            "Kafka bootstrap servers; when set, the local stack starts no broker"),
    Setting("stack_role", "TIDEMARK_STACK_ROLE", "str", "operator",
            "which Kafka user of a `local up --sasl` stack this process signs in as:"
            " operator, replica, job or peer"),
    Setting("topic_prefix", "TIDEMARK_TOPIC_PREFIX", "str", "tidemark.",
            "prefix of the six topic names"),
    Setting("partitions", "TIDEMARK_PARTITIONS", "int", 12, "txlog, queues and purges partitions"),
    Setting("replication_factor", "TIDEMARK_REPLICATION_FACTOR", "int", 3,
            "replication factor of every topic"),
    Setting("min_insync_replicas", "TIDEMARK_MIN_INSYNC_REPLICAS", "int", 2,
            "min.insync.replicas of every topic"),
    Setting("environment", "TIDEMARK_ENVIRONMENT", "str", "default",
            "the environment every record carries"),
    Setting("max_message_bytes", "TIDEMARK_MAX_MESSAGE_BYTES", "int", 1_000_000,
            "largest record value; larger ones are refused before Kafka"),
    Setting("producer_linger_ms", "TIDEMARK_PRODUCER_LINGER_MS", "int", 20,
            "how long a producer waits to fill a batch (librdkafka linger.ms): each batch is a"
            " request the three brokers replicate, so short lingers cost broker CPU"),
    Setting("producer_max_in_flight", "TIDEMARK_PRODUCER_MAX_IN_FLIGHT", "int", 1,
            "produce requests in flight per broker (librdkafka max.in.flight, 1-5): with more"
            " than one, librdkafka's idempotent producer keeps its broker threads busy between"
            " batches (measured 0.4 cores at 2,000 msgs/s against 0.03 with one)", (1, 5)),
    Setting("txlog_retention_ms", "TIDEMARK_TXLOG_RETENTION_MS", "int", 30 * 24 * 3600 * 1000,
            "txlog retention"),
    Setting("queues_delete_retention_ms", "TIDEMARK_QUEUES_DELETE_RETENTION_MS", "int",
            24 * 3600 * 1000, "how long queues tombstones are kept"),
    # local stack
    Setting("brokers", "TIDEMARK_BROKERS", "int", 3, "brokers of the local stack"),
    Setting("replicas", "TIDEMARK_REPLICAS", "layout", None,
            "replica layout of the local stack, e.g. 2x2"),
    # replica nodes
    Setting("metrics_host", "TIDEMARK_METRICS_HOST", "str", "127.0.0.1",
            "address replica nodes and the queues job serve Prometheus metrics on (0.0.0.0 in"
            " containers)"),
    # peers
    # transport security (every gRPC channel is mutual TLS)
    Setting("tls_ca", "TIDEMARK_TLS_CA", "path", None,
            "PEM bundle of the CAs this process trusts (`tidemark ca issue` writes trust.pem)"),
    Setting("tls_cert", "TIDEMARK_TLS_CERT", "path", None,
            "this process's certificate (its identity: node, peer or operator)"),
    Setting("tls_key", "TIDEMARK_TLS_KEY", "path", None, "the private key of TIDEMARK_TLS_CERT"),
    Setting("tls_crl", "TIDEMARK_TLS_CRL", "path", None,
            "the CA's revocation list (crl.pem); revoked callers are refused"),
    Setting("tls_issuer", "TIDEMARK_TLS_ISSUER", "path", None,
            "a CA folder from which each process signs a short-lived certificate of"
            " its own identity (development and tests; default: the local stack's <state>/pki)"),
    Setting("insecure", "TIDEMARK_INSECURE", "bool", False,
            "development only: plaintext gRPC, no caller identity (a warning at every start)"),
    Setting("peer_bind", "TIDEMARK_PEER_BIND", "str", "",
            "host:port a peer's direct-delivery server binds when PeerOptions.bind is left"
            " at its default (127.0.0.1:0); on a host of its own: its address, port 0"),
    Setting("peer_token", "TIDEMARK_PEER_TOKEN", "str", "",
            "a peer's credential for replay and pins (`tidemark peer token PEER`)"),
    Setting("peer_token_file", "TIDEMARK_PEER_TOKEN_FILE", "path", None,
            "file holding a peer's token, read when TIDEMARK_PEER_TOKEN is unset"),
    Setting("peer_dedup_dir", "TIDEMARK_PEER_DEDUP_DIR", "path", None,
            "folder of the peers' persisted dedup stores (one LevelDB per peer id): a message"
            " whose handler completed is not handled again after a crash; unset: off"),
    Setting("peer_dedup_ttl", "TIDEMARK_PEER_DEDUP_TTL", "duration", "24h",
            "how long a peer's persisted dedup store remembers a completed message id"),
    # Spark queues job
    Setting("spark_checkpoint", "TIDEMARK_SPARK_CHECKPOINT", "path", None,
            "checkpoint folder of the queues job (default: STATE_DIR/spark/PREFIXcheckpoint)"),
    Setting("ack_ttl", "TIDEMARK_ACK_TTL", "duration", "24h",
            "how long an ack that beat its Send is remembered"),
    Setting("dedup_window", "TIDEMARK_DEDUP_WINDOW", "duration", "10m",
            "how long an acked or purged id is remembered to drop a late duplicate Send"),
    Setting("delivery_limit", "TIDEMARK_DELIVERY_LIMIT", "int", 5,
            "failed deliveries (DeliveryFailed records) after which the queues job moves a"
            " message to deadletter"),
    Setting("queues_max_restarts", "TIDEMARK_QUEUES_MAX_RESTARTS", "int0", 0,
            "restarts of a failed queues query (1 s backoff doubling to 30 s) before the job"
            " exits 1; 0: unlimited"),
    Setting("spark_master", "TIDEMARK_SPARK_MASTER", "str", None,
            "Spark master (default local[2]; under spark-submit, its own)"),
    Setting("spark_conf", "TIDEMARK_SPARK_CONF", "str", "",
            "extra Spark settings, key=value;key=value"),
    Setting("queues_metrics_port", "TIDEMARK_QUEUES_METRICS_PORT", "int0", 0,
            "port the queues job's driver serves Prometheus /metrics on (batches, rows, state"
            " rows, lag; host: TIDEMARK_METRICS_HOST); 0: no metrics", (0, 65535)),
    Setting("queues_profile", "TIDEMARK_QUEUES_PROFILE", "path", None,
            "write a per-batch time breakdown of the queues job to this JSON-lines file"),
    # tests
    Setting("clock_skew_ms", "TIDEMARK_CLOCK_SKEW_MS", "signed", 0,
            "fault drills only: move this process's wall clock (replica nodes: gossip"
            " timestamps, leases, release ages) by this many ms, negative for behind"),
    Setting("soak_records", "TIDEMARK_SOAK_RECORDS", "int", 10_000_000,
            "records written by the replica soak run (make soak)"),
)

_BY_NAME = {s.name: s for s in SETTINGS}
_BY_ENV = {s.env: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The declared setting ``name`` (KeyError if it is not declared)."""
    return _BY_NAME[name]


def parse(name: str, text: str) -> Any:
    """Parse ``text`` as setting ``name``."""
    return _BY_NAME[name].parse(text)


def env_value(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The typed value of ``name`` from the environment, else its default."""
    spec = _BY_NAME[name]
    env = os.environ if env is None else env
    text = env.get(spec.env)
    if text is None or text == "":
        default = spec.default
        if spec.kind == "duration" and isinstance(default, str):
            return parse_duration_ms(default)
        if spec.kind == "path" and isinstance(default, str):
            return str(Path(default).expanduser())
        return default
    return spec.parse(text)


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Parse every declared ``TIDEMARK_*`` variable that is set; the first bad one raises."""
    env = os.environ if env is None else env
    for var in sorted(env):
        spec = _BY_ENV.get(var)
        if spec is not None and env[var] != "":
            spec.parse(env[var])


def markdown_table() -> str:
    """The configuration table of docs/cli.md."""
    rows = ["| variable | default | what it sets |", "|---|---|---|"]
    for s in SETTINGS:
        default = "" if s.default in (None, "") else f"`{s.default}`"
        rows.append(f"| `{s.env}` | {default} | {s.help} |")
    rows.append(f"| `{KAFKA_CLIENT_PREFIX}<NAME>` | | any Kafka client setting, `_` for `.`"
                " (e.g. `TIDEMARK_KAFKA_SASL_MECHANISMS`), passed to every client, Spark"
                " included |")
    return "\n".join(rows)
