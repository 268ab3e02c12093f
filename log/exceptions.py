"""Errors raised by the log package (Kafka access, codec, local cluster)."""

from __future__ import annotations

__all__ = [
    "TidemarkError", "ConfigError", "CodecError", "BadMarkerError", "UnknownFingerprintError",
    "TruncatedRecordError", "UnknownSchemaError", "LogError", "DeliveryError",
    "UnderReplicatedError", "ClusterLaunchError", "JvmSetupError", "OversizedMessageError",
    "KafkaUnreachableError", "TopicsMissingError",
]


class TidemarkError(Exception):
    """Base of every Tidemark error; its message is one readable line for the CLI."""


class ConfigError(TidemarkError):
    """A config file or environment variable is missing, unreadable or invalid."""


class CodecError(TidemarkError):
    """A record could not be encoded or decoded."""


class BadMarkerError(CodecError):
    """The value does not start with the Avro single-object marker C3 01."""


class UnknownFingerprintError(CodecError):
    """The writer schema fingerprint is not in the registry."""

    def __init__(self, fingerprint: bytes) -> None:
        super().__init__(f"unknown schema fingerprint {fingerprint.hex()}")
        self.fingerprint = fingerprint


class TruncatedRecordError(CodecError):
    """The value ends before the record body does, or the body is corrupt."""


class UnknownSchemaError(CodecError):
    """No schema of that name is known to the codec."""


class LogError(TidemarkError):
    """A Kafka operation failed."""


class DeliveryError(LogError):
    """Kafka did not acknowledge a produced record (e.g. not enough in-sync replicas)."""


class OversizedMessageError(LogError):
    """A record is larger than the configured maximum message size."""


class UnderReplicatedError(LogError):
    """A topic has fewer in-sync replicas than its durability settings require."""


class KafkaUnreachableError(LogError):
    """No broker of the bootstrap list answered before the deadline (wrong address, or the
    whole cluster is down). Distinct from a broker loss, which lookups ride through."""

    def __init__(self, bootstrap: str, timeout_s: float, detail: str = "") -> None:
        super().__init__(f"cannot reach Kafka at {bootstrap or '(no bootstrap)'} within"
                         f" {timeout_s:g} s" + (f" ({detail})" if detail else ""))
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.detail = detail

    def __reduce__(self) -> tuple[type, tuple[str, float, str]]:  # picklable despite __init__
        return (type(self), (self.bootstrap, self.timeout_s, self.detail))


class TopicsMissingError(LogError):
    """The cluster answered, and some topic Tidemark needs does not exist on it."""

    def __init__(self, topics: "list[str] | tuple[str, ...]", bootstrap: str = "") -> None:
        names = ", ".join(topics)
        where = f" on {bootstrap}" if bootstrap else ""
        noun = "topic" if len(topics) == 1 else "topics"
        verb = "does" if len(topics) == 1 else "do"
        super().__init__(f"{noun} {names} {verb} not exist{where}: run `tidemark topics create`"
                         f" (or `tidemark local up`)")
        self.topics = list(topics)
        self.bootstrap = bootstrap

    def __reduce__(self) -> tuple[type, tuple[list[str], str]]:
        return (type(self), (self.topics, self.bootstrap))


class ClusterLaunchError(TidemarkError):
    """The local cluster could not be started, or its state folder is unusable."""


class JvmSetupError(TidemarkError):
    """java or mvn is missing, or Maven could not resolve the JVM artifacts."""
