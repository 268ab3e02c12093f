"""Codec round-trips over arbitrary records, and typed errors for every kind of bad input."""

from __future__ import annotations

import io

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark import schemas
from tidemark.log.exceptions import BadMarkerError, TruncatedRecordError, UnknownFingerprintError
from tidemark.log.wire import MARKER, Codec, default_codec, schema_fingerprint

CODEC = default_codec()
text = st.text(max_size=40)
long_ = st.integers(min_value=-(2**63), max_value=2**63 - 1)
int_ = st.integers(min_value=-(2**31), max_value=2**31 - 1)
blob = st.binary(max_size=300)

RECORDS = {
    "Send": st.fixed_dictionaries({
        "message_id": text, "sender": text, "recipient": text, "environment": text,
        "message_type": text, "payload": blob, "timestamp_ms": long_, "delivery_count": int_}),
    "Ack": st.fixed_dictionaries({"message_id": text, "peer": text, "environment": text,
                                  "timestamp_ms": long_}),
    "Purge": st.fixed_dictionaries({"peer": text, "environment": text, "timestamp_ms": long_},
                                   optional={"signer": blob, "signature": blob}),
    "AckBatch": st.fixed_dictionaries({"peer": text, "environment": text,
                                       "message_ids": st.lists(text, max_size=5),
                                       "timestamp_ms": long_},
                                      optional={"signer": blob, "signature": blob}),
    "QueueEntry": st.fixed_dictionaries({
        "peer": text, "message_id": text, "sender": text, "message_type": text,
        "payload": blob, "timestamp_ms": long_, "txlog_partition": int_,
        "txlog_offset": long_, "delivery_count": int_}),
    "QueueProgress": st.fixed_dictionaries({"txlog_partition": int_, "next_offset": long_,
                                            "batch_id": long_, "timestamp_ms": long_}),
    "PeerDescriptor": st.fixed_dictionaries({
        "peer_id": text, "environment": text, "endpoint": text, "up": st.booleans(),
        "persistent": st.booleans(), "subscriptions": st.lists(text, max_size=5),
        "timestamp_ms": long_}),
}
ANY_RECORD = st.sampled_from(sorted(RECORDS)).flatmap(
    lambda name: st.tuples(st.just(name), RECORDS[name]))


@given(ANY_RECORD)
def test_round_trip(item: tuple[str, dict]) -> None:
    name, record = item
    data = CODEC.encode(name, record)
    assert data[:2] == MARKER
    assert data[2:10] == CODEC.fingerprint_of(name)
    decoded = CODEC.decode(data)
    assert decoded.name == name
    assert decoded.record == {**_defaults(name), **record}


def _defaults(name: str) -> dict:
    """Field defaults of schema ``name`` (fields a generated record may leave out)."""
    return {f["name"]: f["default"].encode("latin-1") if f["type"] == "bytes" else f["default"]
            for f in schemas.load_schema(name)["fields"] if "default" in f}


@given(ANY_RECORD, st.data())
@settings(max_examples=200)
def test_every_truncation_is_a_typed_error(item: tuple[str, dict], data: st.DataObject) -> None:
    name, record = item
    encoded = CODEC.encode(name, record)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises((TruncatedRecordError, BadMarkerError)):
        CODEC.decode(encoded[:cut])


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_crash(junk: bytes) -> None:
    try:
        CODEC.decode(junk)
    except (BadMarkerError, UnknownFingerprintError, TruncatedRecordError):
        pass


def test_bad_marker_and_unknown_fingerprint() -> None:
    good = CODEC.encode("Purge", {"peer": "p", "environment": "e", "timestamp_ms": 1})
    with pytest.raises(BadMarkerError):
        CODEC.decode(b"\x00\x01" + good[2:])
    with pytest.raises(BadMarkerError):
        CODEC.decode(None)
    with pytest.raises(UnknownFingerprintError) as info:
        CODEC.decode(MARKER + b"\xde\xad\xbe\xef\x00\x00\x00\x00" + good[10:])
    assert "deadbeef00000000" in str(info.value)


def _crc64_avro(data: bytes) -> int:
    """The Avro specification's reference CRC-64-AVRO (Rabin) fingerprint."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp & 0xFFFFFFFFFFFFFFFF)
    fp = empty
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


@pytest.mark.parametrize("name", schemas.SCHEMA_NAMES)
def test_fingerprint_matches_the_spec_algorithm(name: str) -> None:
    from fastavro.schema import to_parsing_canonical_form
    parsed = parse_schema(schemas.load_schema(name), named_schemas={})
    canonical = to_parsing_canonical_form(parsed).encode()
    expected = _crc64_avro(canonical).to_bytes(8, "little")
    assert schema_fingerprint(parsed) == expected
    assert CODEC.fingerprint_of(name) == expected


def test_evolution_new_optional_field_reads_old_records() -> None:
    old = schemas.load_schema("Ack")
    new = {**old, "fields": old["fields"] + [
        {"name": "reason", "type": ["null", "string"], "default": None}]}
    reader = Codec({**schemas.load_all(), "Ack": new})
    old_fp = reader.register_writer("Ack", old)
    record = {"message_id": "m1", "peer": "peer-1", "environment": "prod", "timestamp_ms": 5}
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(old), record)
    decoded = reader.decode(MARKER + old_fp + buf.getvalue())
    assert decoded.name == "Ack"
    assert decoded.record == {**record, "reason": None}
    # And the current writer's records still read back with the field present.
    assert reader.decode(reader.encode("Ack", {**record, "reason": "x"})).record["reason"] == "x"


@given(ANY_RECORD)
def test_generated_encoders_match_fastavro_byte_for_byte(item: tuple[str, dict]) -> None:
    name, record = item
    assert CODEC.encode(name, record) == CODEC.encode_with_fastavro(name, record)


@settings(max_examples=60)
@given(st.integers(8150, 8250).map(lambda n: (bytes(range(256)) * 33)[:n]),
       st.tuples(st.integers(8180, 8200), st.characters(blacklist_categories=("Cs",))).map(lambda t: t[1] * t[0]),
       long_, long_)
def test_long_fields_and_nearby_longs_match_fastavro(blob: bytes, text: str, t1: int,
                                                     t2: int) -> None:
    """Lengths past the generated encoder's table (its fallback), and consecutive longs that
    share or do not share their high bits (the cached part of a long's encoding)."""
    for ts in (t1, t2, t1 + 1, t1 ^ (1 << 13), 8191, 8192, -8193):
        if not -(2**63) <= ts < 2**63:
            continue
        record = {"message_id": text, "sender": "s", "recipient": "r", "environment": "e",
                  "message_type": "t", "payload": blob, "timestamp_ms": ts,
                  "delivery_count": 0}
        assert CODEC.encode("Send", record) == CODEC.encode_with_fastavro("Send", record)


@pytest.mark.parametrize("field,value", [("timestamp_ms", 2**63), ("delivery_count", 2**31),
                                         ("message_id", 7), ("payload", "not bytes")])
def test_bad_field_values_are_codec_errors(field: str, value: object) -> None:
    from tidemark.log.exceptions import CodecError
    record = {"message_id": "m", "sender": "s", "recipient": "r", "environment": "e",
              "message_type": "t", "payload": b"", "timestamp_ms": 1, "delivery_count": 0}
    with pytest.raises(CodecError):
        CODEC.encode("Send", {**record, field: value})
