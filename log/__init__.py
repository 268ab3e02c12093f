"""Kafka access for Tidemark (the base layer): settings, topics, the wire format
(:mod:`tidemark.log.wire`: the codec and its fast paths), producer/consumer, offsets, the
partitioner and the JVM artifacts."""

from tidemark.log.consumer import DeadLetterWriter, LogConsumer, decode_or_deadletter, read_to_end
from tidemark.log.exceptions import (
    BadMarkerError,
    ClusterLaunchError,
    CodecError,
    ConfigError,
    DeliveryError,
    JvmSetupError,
    LogError,
    OversizedMessageError,
    TidemarkError,
    TruncatedRecordError,
    UnderReplicatedError,
    UnknownFingerprintError,
    UnknownSchemaError,
)
from tidemark.log.offsets import delete_records, end_offsets, log_start_offsets, watermarks
from tidemark.log.partitioner import murmur2, partition_for, partition_for_peer
from tidemark.log.producer import LogProducer
from tidemark.log.settings import TOPICS, Settings, default_state_dir, load_settings
from tidemark.log.topics import check_replication, describe_topics, ensure_topics, topic_specs
from tidemark.log.wire import MARKER, Codec, Decoded, default_codec, schema_fingerprint

__all__ = [
    "MARKER", "Codec", "Decoded", "default_codec", "schema_fingerprint",
    "DeadLetterWriter", "LogConsumer", "decode_or_deadletter", "read_to_end", "LogProducer",
    "delete_records", "end_offsets", "log_start_offsets", "watermarks",
    "murmur2", "partition_for", "partition_for_peer",
    "TOPICS", "Settings", "default_state_dir", "load_settings",
    "check_replication", "describe_topics", "ensure_topics", "topic_specs",
    "TidemarkError", "ConfigError", "CodecError", "BadMarkerError", "UnknownFingerprintError",
    "TruncatedRecordError", "UnknownSchemaError", "LogError", "DeliveryError",
    "OversizedMessageError", "UnderReplicatedError", "ClusterLaunchError", "JvmSetupError",
]
