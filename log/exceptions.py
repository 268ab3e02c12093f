"""Errors raised by the log package (Kafka access, codec, local cluster)."""

from __future__ import annotations

__all__ = [
    "TidemarkError", "ConfigError", "CodecError", "BadMarkerError", "UnknownFingerprintError",
    "TruncatedRecordError", "UnknownSchemaError", "LogError", "DeliveryError",
    "UnderReplicatedError", "ClusterLaunchError", "JvmSetupError", "OversizedMessageError",
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


class ClusterLaunchError(TidemarkError):
    """The local cluster could not be started, or its state folder is unusable."""


class JvmSetupError(TidemarkError):
    """java or mvn is missing, or Maven could not resolve the JVM artifacts."""
