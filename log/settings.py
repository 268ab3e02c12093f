"""Settings: one TOML file plus TIDEMARK_* environment variables, in one place.

Precedence, lowest first: defaults, the TOML file (``--config`` or ``TIDEMARK_CONFIG``),
environment variables, then explicit overrides (CLI flags). Kafka client settings under
``[kafka.client]`` (or ``TIDEMARK_KAFKA_<NAME>`` with ``_`` for ``.``) pass through to every
producer, consumer, admin client and Spark's Kafka source, so SASL and SSL work, and win over
Tidemark's own tuning; the keys durability and ordering rest on (:data:`OWNED`) and those a
Tidemark setting controls (:data:`BY_SETTING`) are refused up front (:func:`check_client`).
When no bootstrap is configured, the local stack's state folder supplies it.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tidemark.log import registry
from tidemark.log.exceptions import ConfigError

__all__ = ["Settings", "load_settings", "default_state_dir", "read_toml", "java_client_settings",
           "check_client", "JAVA_ONLY", "OWNED", "BY_SETTING", "jaas_quote", "TOPICS"]

#: Logical topic names; the physical name is ``topic_prefix + name``.
TOPICS = ("txlog", "queues", "directory", "config", "deadletter", "purges")

#: The registry settings that are fields of :class:`Settings` (the ``[kafka]`` table).
_KAFKA_KEYS = ("bootstrap", "topic_prefix", "partitions", "replication_factor",
               "min_insync_replicas", "environment", "max_message_bytes", "producer_linger_ms",
               "producer_max_in_flight", "txlog_retention_ms",
               "queues_delete_retention_ms")
_CLIENT_ENV_PREFIX = registry.KAFKA_CLIENT_PREFIX
_RDKAFKA_LOGGER = logging.getLogger("tidemark.librdkafka")


_LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                  "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                  "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def jaas_quote(value: str) -> str:
    """``value`` as a JAAS option value: double-quoted, with backslashes and double quotes
    escaped (the Java client's JAAS parser reads quoted strings with those escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _jaas(module: str, options: Mapping[str, str]) -> str:
    return " ".join([module, "required"] + [f"{k}={jaas_quote(v)}" for k, v in options.items()
                                            ]) + ";"


def _oauthbearer(out: dict[str, str]) -> None:
    """librdkafka's OAUTHBEARER settings as the Java client's: ``sasl.oauthbearer.method=oidc``
    (client id/secret, token endpoint, scope, extensions) uses Kafka's OIDC login handler;
    otherwise ``sasl.oauthbearer.config`` (``principal=... scope=...``) is an unsecured JWT."""
    method = out.pop("sasl.oauthbearer.method", "default").lower()
    options: dict[str, str] = {}
    if method == "oidc":
        for src, dst in (("sasl.oauthbearer.client.id", "clientId"),
                         ("sasl.oauthbearer.client.secret", "clientSecret"),
                         ("sasl.oauthbearer.scope", "scope")):
            if src in out:
                options[dst] = out.pop(src)
        url = out.pop("sasl.oauthbearer.token.endpoint.url", None)
        if url is not None:
            out.setdefault("sasl.oauthbearer.token.endpoint.url", url)
        out.setdefault("sasl.login.callback.handler.class", _OAUTH_HANDLER)
    else:
        for pair in out.pop("sasl.oauthbearer.config", "").split():
            key, _, value = pair.partition("=")
            if key == "principal":
                options["unsecuredLoginStringClaim_sub"] = value
            elif key == "scope":
                options["unsecuredLoginListClaim_scope"] = value
            elif key == "lifeSeconds":
                options["unsecuredLoginLifetimeSeconds"] = value
    for pair in out.pop("sasl.oauthbearer.extensions", "").split(","):
        key, _, value = pair.partition("=")
        if key.strip():
            options[f"extension_{key.strip()}"] = value.strip()
    out.setdefault("sasl.jaas.config", _jaas(_OAUTH_MODULE, options))


def _pem_file(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the PEM file {path}: {exc.strerror}") from None


def _client_certificate(out: dict[str, str]) -> None:
    """mTLS with PEM: librdkafka's ``ssl.certificate.location``/``ssl.key.location`` (or the
    inline ``ssl.certificate.pem``/``ssl.key.pem``) become a PEM keystore: one file holding
    both is ``ssl.keystore.location``; separate files are passed inline as
    ``ssl.keystore.certificate.chain`` and ``ssl.keystore.key``. ``ssl.key.password`` is
    shared. The Java client needs the key in PKCS#8 (``BEGIN [ENCRYPTED] PRIVATE KEY``)."""
    cert_path, key_path = out.pop("ssl.certificate.location", None), out.pop(
        "ssl.key.location", None)
    cert, key = out.pop("ssl.certificate.pem", None), out.pop("ssl.key.pem", None)
    if "ssl.keystore.location" in out and (cert_path or key_path or cert or key):
        raise ConfigError("give either ssl.keystore.location or a PEM certificate and key, "
                          "not both")
    if cert_path and key_path and Path(cert_path).resolve() == Path(key_path).resolve():
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.location"] = cert_path
        return
    cert = _pem_file(cert_path) if cert_path else cert
    key = _pem_file(key_path) if key_path else key
    if (cert is None) != (key is None):
        raise ConfigError("a client certificate needs its key, and a key its certificate "
                          "(ssl.certificate.location and ssl.key.location)")
    if cert is not None and key is not None:
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.certificate.chain"] = cert
        out["ssl.keystore.key"] = key


def java_client_settings(client: Mapping[str, Any]) -> dict[str, str]:
    """The ``[kafka.client]`` settings (librdkafka names) as the Java client spells them.

    Shared names (``security.protocol``, ``sasl.mechanism``, ``ssl.endpoint...``,
    ``ssl.key.password``) pass through. librdkafka-only ones are translated:
    ``sasl.mechanisms`` becomes ``sasl.mechanism``; ``sasl.username``/``sasl.password``
    become ``sasl.jaas.config`` for PLAIN and SCRAM (values quoted and escaped); OAUTHBEARER
    settings become the OAuthBearer login module (and the OIDC login handler for
    ``sasl.oauthbearer.method=oidc``); ``ssl.ca.location``/``ssl.ca.pem`` a PEM truststore;
    a PEM client certificate and key a PEM keystore (mTLS). A ``sasl.jaas.config`` given
    explicitly wins.
    """
    out = {k: str(v) for k, v in client.items()}
    if "sasl.mechanisms" in out:
        out.setdefault("sasl.mechanism", out.pop("sasl.mechanisms"))
    mechanism = out.get("sasl.mechanism", "").upper()
    user, password = out.pop("sasl.username", None), out.pop("sasl.password", None)
    module = _LOGIN_MODULES.get(mechanism)
    if user is not None and password is not None and module and "sasl.jaas.config" not in out:
        out["sasl.jaas.config"] = _jaas(module, {"username": user, "password": password})
    if mechanism == "OAUTHBEARER":
        _oauthbearer(out)
    ca = out.pop("ssl.ca.location", None)
    if ca and "ssl.truststore.location" not in out:
        out["ssl.truststore.location"] = ca
        out.setdefault("ssl.truststore.type", "PEM")
    ca_pem = out.pop("ssl.ca.pem", None)
    if ca_pem and "ssl.truststore.location" not in out:
        out["ssl.truststore.certificates"] = ca_pem
        out.setdefault("ssl.truststore.type", "PEM")
    _client_certificate(out)
    return out


#: Java client keys librdkafka does not know, with what to write instead.
JAVA_ONLY = {
    "sasl.jaas.config": "sasl.username and sasl.password (with sasl.mechanism)",
    "ssl.truststore.location": "ssl.ca.location (a PEM file)",
    "ssl.truststore.password": "nothing: ssl.ca.location takes an unencrypted PEM file",
    "ssl.truststore.type": "nothing: ssl.ca.location is PEM",
    "ssl.keystore.type": "ssl.certificate.location and ssl.key.location (PEM files)",
    "key.serializer": "nothing: Tidemark encodes its own records",
    "value.serializer": "nothing: Tidemark encodes its own records",
    "key.deserializer": "nothing: Tidemark decodes its own records",
    "value.deserializer": "nothing: Tidemark decodes its own records",
    "client.dns.lookup": "client.dns.lookup is Java-only; librdkafka resolves every address",
    "sasl.login.callback.handler.class": "sasl.oauthbearer.method=oidc and its settings",
}
#: Client keys whose value Tidemark's correctness rests on: ``[kafka.client]`` may repeat the
#: value (any of the spellings here) but not change it.
OWNED: dict[str, tuple[tuple[str, ...], str]] = {
    "acks": (("all", "-1"), "a Send is acknowledged once every in-sync replica has it"),
    "enable.idempotence": (("true",), "a retried append must not be written twice"),
    "partitioner": (("murmur2_random",), "peers, replica nodes and Spark must agree on a"
                                         " recipient's partition (Java's murmur2)"),
    "isolation.level": (("read_committed",), "readers must not see aborted records"),
    "enable.auto.commit": (("false",), "readers keep their own positions"),
    "enable.auto.offset.store": (("false",), "readers keep their own positions"),
    "enable.partition.eof": (("false",), "readers do not expect end-of-partition events"),
    "auto.offset.reset": (("earliest", "smallest", "beginning"),
                          "a position past the log start must resume at the start, not skip"),
}
#: Client keys a Tidemark setting of its own controls: set that instead.
BY_SETTING = {
    "linger.ms": "producer_linger_ms", "queue.buffering.max.ms": "producer_linger_ms",
    "max.in.flight": "producer_max_in_flight",
    "max.in.flight.requests.per.connection": "producer_max_in_flight",
    "message.max.bytes": "max_message_bytes",
}
_CHECKED: set[frozenset[tuple[str, str]]] = set()


def _ownership(key: str, value: str) -> str | None:
    """Why ``key = value`` cannot be a client setting (None: it can)."""
    if key in BY_SETTING:
        spec = registry.setting(BY_SETTING[key])
        return (f"{key} is set by Tidemark's own setting {spec.env} ([kafka]"
                f" {spec.name}): set that instead")
    owned = OWNED.get(key)
    if owned is not None and value.strip().lower() not in owned[0]:
        return (f"{key}={value} cannot be changed: Tidemark's clients use"
                f" {key}={owned[0][0]} ({owned[1]})")
    return None


def check_client(client: Mapping[str, str], where: str = "[kafka.client]") -> None:
    """Refuse Kafka client settings up front, with what to write instead: a Java-only key, a
    key or value librdkafka rejects (an unknown property, a value out of its range, a
    certificate file that does not exist), a key one of Tidemark's own settings controls
    (:data:`BY_SETTING`), or a changed value of a key Tidemark relies on (:data:`OWNED`).
    Checked once per distinct set of settings."""
    items = frozenset((str(k), str(v)) for k, v in client.items())
    if not items or items in _CHECKED:
        return
    for key, _ in sorted(items):
        if key in JAVA_ONLY:
            raise ConfigError(f"{where}: {key} is a Java client setting; Tidemark's clients are"
                              f" librdkafka's: use {JAVA_ONLY[key]}")
    from confluent_kafka import KafkaException, Producer
    quiet = logging.getLogger("tidemark.librdkafka.check")
    quiet.propagate, quiet.disabled = False, True
    complete = True
    try:
        Producer({**dict(items), "logger": quiet})
    except (KafkaException, ValueError, TypeError) as exc:
        err = exc.args[0] if exc.args else exc
        text = err.str() if hasattr(err, "str") else str(err)
        # a key or value librdkafka rejects is refused here; settings that are only
        # incomplete together (a SASL mechanism whose user comes later) are left to the
        # client that uses them
        if not text.startswith("Failed to create"):
            raise ConfigError(f"{where}: {text}") from None
        complete = False
    for key, value in sorted(items):
        why = _ownership(key, value)
        if why is not None:
            raise ConfigError(f"{where}: {why}")
    if complete:
        _CHECKED.add(items)


def _default(name: str) -> Any:
    return registry.setting(name).default


def default_state_dir() -> Path:
    """The local stack's state folder: ``TIDEMARK_STATE_DIR`` or ``./.tidemark``."""
    return Path(registry.env_value("state_dir")).resolve()



#: librdkafka's defaults, made to come back within seconds after a network partition heals
#: (each is overridden by the same key in ``[kafka.client]``). A request unanswered for 10 s
#: (a fetch: 10 s beyond ``fetch.wait.max.ms``) drops its connection, a connection attempt
#: is given up after 10 s, and a lost broker is retried at least every 2 s. At librdkafka's
#: own 60 s / 30 s / 10 s a replica cut off for a minute went on waiting for TCP's
#: retransmission back-off, 20-30 s after the heal (docs/partitions.md).
PARTITION_RECOVERY: dict[str, int] = {
    "socket.timeout.ms": 10000,
    "socket.connection.setup.timeout.ms": 10000,
    "reconnect.backoff.max.ms": 2000,
}


@dataclass(frozen=True)
class Settings:
    """What every Kafka-facing component needs to agree on."""

    bootstrap: str = _default("bootstrap")
    topic_prefix: str = _default("topic_prefix")
    partitions: int = _default("partitions")
    replication_factor: int = _default("replication_factor")
    min_insync_replicas: int = _default("min_insync_replicas")
    environment: str = _default("environment")
    max_message_bytes: int = _default("max_message_bytes")
    producer_linger_ms: int = _default("producer_linger_ms")
    producer_max_in_flight: int = _default("producer_max_in_flight")
    txlog_retention_ms: int = _default("txlog_retention_ms")
    queues_delete_retention_ms: int = _default("queues_delete_retention_ms")
    client: Mapping[str, str] = field(default_factory=dict)
    source: str = "defaults"

    def topic(self, name: str) -> str:
        """The physical topic name for a logical one (``txlog`` -> ``tidemark.txlog``)."""
        return self.topic_prefix + name

    def _base(self) -> dict[str, Any]:
        if not self.bootstrap:
            raise ConfigError(
                "no Kafka bootstrap configured: run `tidemark local up`, set TIDEMARK_BOOTSTRAP,"
                " or give [kafka] bootstrap in the config file")
        # librdkafka's own log lines go through Python logging ("tidemark.librdkafka"), which
        # the console keeps quiet unless --log-level DEBUG: errors reach callers as exceptions.
        conf: dict[str, Any] = {"logger": _RDKAFKA_LOGGER, **PARTITION_RECOVERY}
        conf.update(self.client)
        conf["bootstrap.servers"] = self.bootstrap
        return conf

    def _tuned(self, conf: dict[str, Any], tuning: Mapping[str, Any]) -> None:
        """Put Tidemark's tuning (its defaults and a component's own ``extra``) into ``conf``,
        except where ``[kafka.client]`` names the key: the user's value stands."""
        conf.update({k: v for k, v in tuning.items() if k not in self.client})

    def producer_config(self, **extra: Any) -> dict[str, Any]:
        """Durable producer settings: acks=all, idempotence, Java-compatible murmur2. A
        ``[kafka.client]`` key wins over the tuning here and over ``extra``, except the keys
        :data:`OWNED` and :data:`BY_SETTING` name (refused there when they conflict)."""
        conf = self._base()
        self._tuned(conf, {
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "compression.type": "lz4",
        })
        conf.update({
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": self.producer_linger_ms,
            "max.in.flight": self.producer_max_in_flight,
            "message.max.bytes": self.max_message_bytes + 4096,
        })
        self._tuned(conf, extra)
        return conf

    def consumer_config(self, **extra: Any) -> dict[str, Any]:
        """Consumer settings for manual assignment (no consumer group commits); a
        ``[kafka.client]`` key wins over the tuning and ``extra`` as in :meth:`producer_config`."""
        conf = self._base()
        conf.update({
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "isolation.level": "read_committed",
        })
        self._tuned(conf, {
            "group.id": "tidemark-unused",
            "fetch.wait.max.ms": 500,
            # librdkafka postpones a partition's next fetch by this much once its local queue
            # is over queued.min.messages / queued.max.messages.kbytes; at the default 1000 ms
            # a reader faster than the fetches (a replica catching up) drained the queue and
            # then sat idle: 200 ms ingest steps with no record for up to 2.2 s of a 4.6 s
            # run (docs/replica.md, "Ingest fast path").
            "fetch.queue.backoff.ms": 10,
        })
        self._tuned(conf, extra)
        return conf

    def java_client_config(self) -> dict[str, str]:
        """Bootstrap plus the passthrough settings spelled for the Java client (Spark)."""
        if not self.bootstrap:
            self._base()  # raises the readable ConfigError
        return {**java_client_settings(self.client), "bootstrap.servers": self.bootstrap}

    def admin_config(self) -> dict[str, Any]:
        """Admin client settings."""
        return self._base()

    def with_overrides(self, **values: Any) -> "Settings":
        """A copy with the non-None values replaced."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; every failure is one :class:`ConfigError` line."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None


def _coerce(name: str, value: Any, kind: type) -> Any:
    try:
        out = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be {kind.__name__}, got {value!r}") from None
    if kind is int and out <= 0 and name not in ("txlog_retention_ms",):
        raise ConfigError(f"{name} must be positive, got {value!r}")
    return out


def _stack_client(state_doc: Mapping[str, Any], env: Mapping[str, str],
                  state_file: Path) -> Mapping[str, Any]:
    """The Kafka client settings a local stack's state file gives this process: its role's
    user (``roles``) when the stack has one per role, else the stack's ``client``."""
    roles = state_doc.get("roles")
    spec = registry.setting("stack_role")
    role = env.get(spec.env) or str(spec.default)
    if not roles:
        return dict(state_doc.get("client", {}))
    if role not in roles:
        raise ConfigError(f"{spec.env}={role}: {state_file} has no such Kafka user (roles:"
                          f" {', '.join(sorted(roles))})")
    return dict(roles[role])


def load_settings(path: str | os.PathLike[str] | None = None,
                  env: Mapping[str, str] | None = None,
                  state_dir: str | os.PathLike[str] | None = None,
                  client_extra: Mapping[str, str] | None = None,
                  **overrides: Any) -> Settings:
    """Build :class:`Settings` from defaults, TOML, environment and overrides;
    ``client_extra``: librdkafka settings that win over the others (the CLI's ``-X``)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    client: dict[str, str] = {}
    sources = ["defaults"]
    path = path or env.get(registry.setting("config").env)
    if path:
        doc = read_toml(Path(path))
        kafka = doc.get("kafka", {})
        if not isinstance(kafka, dict):
            raise ConfigError(f"{path}: [kafka] must be a table")
        known = {f for f in Settings.__dataclass_fields__ if f not in ("client", "source")}
        for key, value in kafka.items():
            if key == "client":
                if not isinstance(value, dict):
                    raise ConfigError(f"{path}: [kafka.client] must be a table")
                client.update({str(k): str(v) for k, v in value.items()})
            elif key in known:
                kind = type(getattr(Settings, key))
                values[key] = _coerce(key, value, kind)
            else:
                raise ConfigError(f"{path}: unknown key kafka.{key}")
        if "environment" in doc.get("peer", {}):
            values["environment"] = str(doc["peer"]["environment"])
        sources.append(str(path))
    for key in _KAFKA_KEYS:
        spec = registry.setting(key)
        if env.get(spec.env):
            values[key] = spec.parse(env[spec.env])
            sources.append(spec.env)
    for var, value in env.items():
        if var.startswith(_CLIENT_ENV_PREFIX) and len(var) > len(_CLIENT_ENV_PREFIX):
            client[var[len(_CLIENT_ENV_PREFIX):].lower().replace("_", ".")] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    if not values.get("bootstrap"):
        state = Path(state_dir) if state_dir else default_state_dir()
        state_file = state / "state.json"
        if state_file.exists():
            try:
                state_doc = json.loads(state_file.read_text())
                values["bootstrap"] = state_doc["bootstrap"]
                # the stack's client settings (SASL of `local up --sasl`: the user of this
                # process's role, TIDEMARK_STACK_ROLE); explicit ones win
                client = {**{str(k): str(v) for k, v in
                             _stack_client(state_doc, env, state_file).items()}, **client}
                sources.append(str(state_file))
            except (ValueError, KeyError, AttributeError):
                raise ConfigError(f"{state_file} is not a valid local-stack state file") from None
    if client_extra:
        client.update({str(k): str(v) for k, v in client_extra.items()})
    check_client(client, "Kafka client settings ([kafka.client], TIDEMARK_KAFKA_* or -X)")
    return Settings(client=client, source=", ".join(sources), **values)
