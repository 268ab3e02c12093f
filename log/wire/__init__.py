"""The Avro wire format of Tidemark's records, in one place: single-object encoding (the
codec), varints, the generated and hand-written encoders with their self-checks against
fastavro, the generated readers, the structural scanners of txlog values, replay rows and
the byte patching of encoded Sends."""

from tidemark.log.wire.ack_batch_encoder import AckBatchEncoder
from tidemark.log.wire.ack_batch_scanner import (
    ACK_BATCH,
    AckBatchFields,
    AckBatchScanner,
    AdmissionScanner,
    Span,
    ack_batch_header,
    ack_batch_scanner,
    admission_scanner,
    scan_ack_batch,
)
from tidemark.log.wire.codec import (
    HEADER_SIZE,
    MARKER,
    Codec,
    Decoded,
    default_codec,
    schema_fingerprint,
)
from tidemark.log.wire.encoders import compile_encoder, compile_object_encoder
from tidemark.log.wire.patching import direct_mark, mark_direct
from tidemark.log.wire.primitives import bytes_bytes, string_bytes
from tidemark.log.wire.readers import (
    FlatReader,
    RecordReader,
    compile_flat_reader,
    compile_tuple_reader,
    flat_fields,
)
from tidemark.log.wire.replay_rows import (
    HEAD_SIZE,
    ROW_HEAD,
    ROW_TAG,
    Row,
    RowError,
    decode_row,
    encode_row,
    entry_record,
    is_row,
    queue_entry,
)
from tidemark.log.wire.scanners import (
    ACK,
    PURGE,
    SEND,
    Fields,
    Scanner,
    read_ack,
    read_purge,
    read_send,
    scan_ack,
    scan_purge,
    scan_send,
    scanner_for,
    txlog_readers,
    txlog_scanners,
)
from tidemark.log.wire.selfcheck import require_same_as_fastavro, same_as_fastavro, sample_records
from tidemark.log.wire.send_encoder import SendEncoder
from tidemark.log.wire.signed import (
    SIGNATURE_CONTEXT,
    SIGNED_RECORDS,
    Sealer,
    is_signed,
    seal,
    signed_message,
    signed_prefix,
)
from tidemark.log.wire.varints import (
    LENGTHS,
    length_bytes,
    read_long,
    varint,
    zigzag_int,
    zigzag_long,
)

__all__ = [
    "MARKER", "HEADER_SIZE", "Codec", "Decoded", "default_codec", "schema_fingerprint",
    "varint", "zigzag_long", "zigzag_int", "length_bytes", "LENGTHS", "read_long",
    "string_bytes", "bytes_bytes",
    "compile_encoder", "compile_object_encoder", "sample_records", "same_as_fastavro",
    "require_same_as_fastavro", "SendEncoder", "AckBatchEncoder",
    "RecordReader", "FlatReader", "flat_fields", "compile_flat_reader", "compile_tuple_reader",
    "SEND", "ACK", "PURGE", "Scanner", "Fields", "txlog_scanners", "scanner_for", "scan_send",
    "scan_ack", "scan_purge", "txlog_readers", "read_send", "read_ack", "read_purge",
    "ACK_BATCH", "AckBatchFields", "Span", "AckBatchScanner", "ack_batch_scanner",
    "ack_batch_header", "scan_ack_batch", "AdmissionScanner", "admission_scanner",
    "ROW_TAG", "ROW_HEAD", "HEAD_SIZE", "Row", "RowError", "encode_row", "decode_row", "is_row",
    "entry_record", "queue_entry",
    "mark_direct", "direct_mark",
    "SIGNATURE_CONTEXT", "SIGNED_RECORDS", "Sealer", "seal", "signed_prefix", "signed_message",
    "is_signed",
]
