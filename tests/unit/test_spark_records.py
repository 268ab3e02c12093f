"""The job's fast txlog reader decodes exactly what the codec decodes (or fails the same way),
and its hand-built state requests are the bytes PySpark's protobuf classes produce."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.log.codec import default_codec
from tidemark.log.exceptions import CodecError
from tidemark.spark_streaming.records import RecordReader

C = default_codec()
READER = RecordReader(C)
text = st.text(max_size=40)
long = st.integers(-(1 << 63), (1 << 63) - 1)
records = st.one_of(
    st.tuples(st.just("Send"), st.fixed_dictionaries({
        "message_id": text, "sender": text, "recipient": text, "environment": text,
        "message_type": text, "payload": st.binary(max_size=300), "timestamp_ms": long,
        "delivery_count": st.integers(-(1 << 31), (1 << 31) - 1),
        "direct_incarnation": st.one_of(st.none(), text)})),
    st.tuples(st.just("Ack"), st.fixed_dictionaries({
        "message_id": text, "peer": text, "environment": text, "timestamp_ms": long})),
    st.tuples(st.just("Purge"), st.fixed_dictionaries({
        "peer": text, "environment": text, "timestamp_ms": long})))


def _view(decoder: Any, value: bytes) -> object:
    """``(name, record)`` as ``decoder`` reads ``value``, or the CodecError type it raises."""
    try:
        d = decoder.decode(value)
        return d.name, d.record
    except CodecError as exc:
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(records, st.data())
def test_fast_reader_matches_the_codec(case: tuple[str, dict], data: st.DataObject) -> None:
    name, record = case
    fields = {f["name"] for f in C._named[name]["fields"]}
    value = C.encode(name, {k: v for k, v in record.items() if k in fields})
    assert _view(READER, value) == _view(C, value) == (name, READER.decode(value).record)
    cut = data.draw(st.integers(0, len(value)))
    flip = data.draw(st.integers(0, max(0, len(value) - 1)))
    damaged = bytearray(value)
    if damaged:
        damaged[flip] ^= data.draw(st.integers(1, 255))
    for bad in (value[:cut], bytes(damaged), value + b"\x00"):
        assert _view(READER, bad) == _view(C, bad)


def test_hand_built_state_requests_are_pysparks_bytes() -> None:
    proto = pytest.importorskip("pyspark.sql.streaming.proto.StateMessage_pb2")
    from tidemark.spark_streaming.pyspark_state import _same_bytes
    assert _same_bytes(proto)
