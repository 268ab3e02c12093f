"""The hand-written and generated Avro encoders against fastavro, byte for byte: the peer's
Send and AckBatch encoders, the payload (object) encoder, the construction-time self-checks
every generated or hand-written encoder runs, and the reader of every flat schema. (The
codec's record encoders over arbitrary records are in test_codec.py.)
"""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.log.wire import (
    MARKER,
    AckBatchEncoder,
    SendEncoder,
    compile_encoder,
    compile_flat_reader,
    compile_object_encoder,
    default_codec,
    same_as_fastavro,
    sample_records,
)

#: 8 KiB strings and bytes (past the length table) are large inputs on purpose
BIG = [HealthCheck.data_too_large]
CODEC = default_codec()
SEND = CODEC.schema("Send")
HEADER = MARKER + CODEC.fingerprint_of("Send")
FLAT = [n for n in CODEC.names if list(sample_records(CODEC.schema(n)))]

text = st.text(max_size=40) | st.text(min_size=8190, max_size=8200, alphabet="ab")
blob = st.binary(max_size=300) | st.binary(min_size=8190, max_size=8200)
longs = st.integers(-(1 << 63), (1 << 63) - 1)


def _fastavro(schema: dict[str, Any], header: bytes, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(header)
    schemaless_writer(buf, schema, record)
    return buf.getvalue()


@settings(max_examples=300, deadline=None, suppress_health_check=BIG)
@given(sender=st.text(max_size=30), environment=st.text(max_size=12), message_id=text,
       recipients=st.lists(st.text(max_size=30), min_size=1, max_size=4),
       message_type=st.text(max_size=50), payload=blob, timestamps=st.lists(longs, min_size=1,
                                                                              max_size=4))
def test_the_send_encoder_writes_what_fastavro_writes(
        sender: str, environment: str, message_id: str, recipients: list[str],
        message_type: str, payload: bytes, timestamps: list[int]) -> None:
    enc = SendEncoder(HEADER, sender, environment, SEND)
    for recipient in recipients:            # its caches (names, the current millisecond) too
        for ts in timestamps + timestamps[:1]:
            record = {"message_id": message_id, "sender": sender, "recipient": recipient,
                      "environment": environment, "message_type": message_type,
                      "payload": payload, "timestamp_ms": ts, "delivery_count": 0,
                      "direct_incarnation": None}
            assert enc.encode(message_id, recipient, message_type, payload, ts) \
                == _fastavro(SEND, HEADER, record)


@settings(max_examples=300, deadline=None, suppress_health_check=BIG)
@given(sender=st.text(max_size=30), environment=st.text(max_size=12),
       sends=st.lists(st.tuples(text, st.text(max_size=30), st.sampled_from(["a.A", "b.B"]),
                                blob, longs), min_size=1, max_size=6))
def test_a_bound_send_encoder_writes_what_fastavro_writes(
        sender: str, environment: str, sends: list[tuple[str, str, str, bytes, int]]) -> None:
    """``bind``: the Send with the payload encoded from the message in the same call, for
    any order of types, recipients and timestamps (the caches are shared with ``encode``)."""
    enc = SendEncoder(HEADER, sender, environment, SEND)
    bound = {name: enc.bind(name, lambda o: o.payload) for name in ("a.A", "b.B")}
    for message_id, recipient, message_type, payload, ts in sends + sends[:1]:
        record = {"message_id": message_id, "sender": sender, "recipient": recipient,
                  "environment": environment, "message_type": message_type,
                  "payload": payload, "timestamp_ms": ts, "delivery_count": 0,
                  "direct_incarnation": None}
        got = bound[message_type](SimpleNamespace(payload=payload), message_id, recipient, ts)
        assert got == _fastavro(SEND, HEADER, record)
        assert enc.encode(message_id, recipient, message_type, payload, ts) == got


def test_a_bound_send_encoder_passes_the_payload_encoders_error_through() -> None:
    enc = SendEncoder(HEADER, "A", "test", SEND)

    def refuse(obj: Any) -> bytes:
        raise TypeError("not a payload")
    with pytest.raises(TypeError, match="not a payload"):
        enc.bind("a.A", refuse)(object(), "A-1", "B", 1)


def test_the_send_encoder_refuses_a_schema_it_does_not_write() -> None:
    grown = {**SEND, "fields": [*SEND["fields"], {"name": "priority", "type": "int",
                                                  "default": 0}]}
    with pytest.raises(RuntimeError, match="update it with the schema"):
        SendEncoder(HEADER, "A", "test", grown)


@pytest.mark.parametrize("name", FLAT)
def test_every_flat_schema_gets_a_self_checked_encoder_and_reader(name: str) -> None:
    schema = CODEC.schema(name)
    header = MARKER + CODEC.fingerprint_of(name)
    encode = compile_encoder(schema, header)
    read = compile_flat_reader(schema)
    assert encode is not None and read is not None
    for record in sample_records(schema):
        value = _fastavro(schema, header, record)
        assert encode(record) == value
        assert read(value) == schemaless_reader(io.BytesIO(value[len(header):]), schema, None)


def test_a_self_check_fails_on_an_encoder_that_disagrees_with_fastavro() -> None:
    assert not same_as_fastavro(lambda r: b"", SEND, HEADER)
    off_by_one = compile_encoder(SEND, HEADER)
    assert off_by_one is not None
    assert not same_as_fastavro(lambda r: off_by_one(r) + b"\x00", SEND, HEADER)
    assert not same_as_fastavro(off_by_one, SEND, HEADER, fixed={"payload": "not bytes"})


ENVELOPE = {"type": "record", "name": "Doc", "fields": [
    {"name": "s", "type": "string"}, {"name": "b", "type": "bytes"}, {"name": "i", "type": "int"},
    {"name": "n", "type": "long"}, {"name": "ok", "type": "boolean"},
    {"name": "d", "type": "double"}, {"name": "f", "type": "float"},
    {"name": "maybe", "type": ["null", "string"]}]}


@settings(max_examples=200, deadline=None, suppress_health_check=BIG)
@given(s=text, b=blob, i=st.integers(-(1 << 31), (1 << 31) - 1), n=longs, ok=st.booleans(),
       d=st.floats(allow_nan=False), f=st.floats(width=32, allow_nan=False),
       maybe=st.none() | st.text(max_size=10))
def test_the_payload_encoder_writes_what_fastavro_writes(**fields: Any) -> None:
    encode = compile_object_encoder(ENVELOPE, b"")
    assert encode is not None
    assert encode(SimpleNamespace(**fields)) == _fastavro(ENVELOPE, b"", fields)


@settings(max_examples=200, deadline=None, suppress_health_check=BIG)
@given(peer=st.text(max_size=30), environment=st.text(max_size=12),
       ids=st.lists(text | st.text(min_size=60, max_size=70), max_size=6),
       timestamps=st.lists(longs, min_size=1, max_size=3))
def test_the_ack_batch_encoder_writes_what_fastavro_writes(
        peer: str, environment: str, ids: list[str], timestamps: list[int]) -> None:
    enc = AckBatchEncoder(CODEC, peer, environment)
    assert enc.encode == enc.encode_fast
    for i, ts in enumerate(timestamps):
        assert enc.encode(ids, ts) == CODEC.encode_with_fastavro("AckBatch", {
            "peer": peer, "environment": environment, "message_ids": ids, "timestamp_ms": ts})
        span = (i, abs(ts) % (1 << 62), ts)  # a range ack's fields (any longs)
        assert enc.encode(ids, ts, span) == CODEC.encode_with_fastavro("AckBatch", {
            "peer": peer, "environment": environment, "message_ids": ids, "timestamp_ms": ts,
            "txlog_partition": span[0], "first_offset": span[1], "last_offset": span[2]})


@settings(max_examples=100, deadline=None, suppress_health_check=BIG)
@given(peer=st.text(max_size=30), environment=st.text(max_size=12),
       ids=st.lists(text | st.text(min_size=60, max_size=70), max_size=6), ts=longs,
       signer=st.binary(max_size=700), signature=st.binary(max_size=80))
def test_a_sealed_ack_batch_is_fastavros_with_its_signer_and_signature(
        peer: str, environment: str, ids: list[str], ts: int, signer: bytes,
        signature: bytes) -> None:
    """With a seal (the peer's signing step; here a fixed certificate and signature), the
    encoder writes fastavro's bytes of the record holding both, and the signed part is the
    unsigned encoding without its two empty fields."""
    from tidemark.log.wire import SIGNATURE_CONTEXT, seal, signed_message
    signed: list[bytes] = []

    def sign(message: bytes) -> bytes:
        signed.append(message)
        return signature
    enc = AckBatchEncoder(CODEC, peer, environment, lambda v: seal(v, signer, sign))
    value = enc.encode(ids, ts)
    record = {"peer": peer, "environment": environment, "message_ids": ids, "timestamp_ms": ts}
    assert value == CODEC.encode_with_fastavro("AckBatch", {**record, "signer": signer,
                                                            "signature": signature})
    unsigned = CODEC.encode_with_fastavro("AckBatch", {**record, "signer": b"",
                                                       "signature": b""})
    assert signed[-1] == SIGNATURE_CONTEXT + unsigned[:-2]
    assert signed_message(value, signer, signature) == signed[-1]
    assert enc.encode_with_codec(ids, ts) == value


def test_the_ack_batch_encoder_refuses_a_schema_it_does_not_write() -> None:
    from tidemark import schemas
    from tidemark.log.wire import Codec
    grown = schemas.load_schema("AckBatch")
    grown = {**grown, "fields": [*grown["fields"], {"name": "x", "type": "long", "default": 5}]}
    with pytest.raises(RuntimeError, match="update it with the schema"):
        AckBatchEncoder(Codec({**schemas.load_all(), "AckBatch": grown}), "p", "test")


def test_a_generated_encoder_that_disagrees_with_fastavro_raises_when_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tidemark.log.wire import primitives
    monkeypatch.setitem(primitives.RECORD_HELPERS, "long", lambda n: b"\x00")
    with pytest.raises(RuntimeError, match="record encoder for .*Send does not write"):
        compile_encoder(SEND, HEADER)
    monkeypatch.setitem(primitives.CHECKED_HELPERS, "double", lambda n: b"\x00")
    with pytest.raises(RuntimeError, match="object encoder for Doc does not write"):
        compile_object_encoder(ENVELOPE, b"")
