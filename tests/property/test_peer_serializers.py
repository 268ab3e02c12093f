"""Payload serializers: round trips, the fast encoder equals fastavro, malformed input is a
PayloadError and nothing else."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from fastavro import schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.exceptions import PayloadError
from tidemark.peer_client.serializers import AvroSerializer, JsonSerializer, _to_data, decode_all


@dataclass
class Flat:
    name: str
    count: int
    ok: bool
    blob: bytes
    note: str | None = None


@dataclass
class Line:
    sku: str
    qty: int


@dataclass
class Nested:
    order_id: str
    price: float
    lines: list[Line] = field(default_factory=list)
    tags: dict[str, int] = field(default_factory=dict)
    parent: Line | None = None


LONG = st.integers(-(2**63), 2**63 - 1)
flats = st.builds(Flat, st.text(), LONG, st.booleans(), st.binary(), st.none() | st.text())
nesteds = st.builds(Nested, st.text(), st.floats(allow_nan=False),
                    st.lists(st.builds(Line, st.text(), LONG), max_size=4),
                    st.dictionaries(st.text(), LONG, max_size=3),
                    st.none() | st.builds(Line, st.text(), LONG))

FLAT = AvroSerializer(Flat, "test.Flat")
NESTED = AvroSerializer(Nested, "test.Nested")


@settings(max_examples=200, deadline=None)
@given(flats)
def test_flat_round_trip_and_fast_path_equals_fastavro(obj: Flat) -> None:
    data = FLAT.encode(obj)
    assert FLAT.decode(data) == obj
    buf = io.BytesIO()
    buf.write(data[:10])
    schemaless_writer(buf, FLAT._parsed, _to_data(obj))
    assert buf.getvalue() == data
    assert JsonSerializer(Flat).decode(JsonSerializer(Flat).encode(
        Flat(obj.name, obj.count, obj.ok, b"", obj.note))) == Flat(obj.name, obj.count, obj.ok,
                                                                  b"", obj.note)
    assert JsonSerializer(Flat).decode(JsonSerializer(Flat).encode(obj)) == obj


@settings(max_examples=200, deadline=None)
@given(nesteds)
def test_nested_round_trip(obj: Nested) -> None:
    assert NESTED.decode(NESTED.encode(obj)) == obj


@settings(max_examples=300, deadline=None)
@given(flats, st.binary(max_size=40), st.integers(0, 60))
def test_malformed_payloads_raise_payload_error_only(obj: Flat, junk: bytes, cut: int) -> None:
    data = FLAT.encode(obj)
    for bad in (junk, data[:cut], data + junk[:1] if junk else data + b"\x00",
                data[:10] + junk):
        if bad == data:
            continue
        try:
            FLAT.decode(bad)
        except PayloadError:
            pass


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(flats, st.sampled_from(["ok", "ok", "ok", "cut", "junk"]),
                          st.binary(max_size=20)), max_size=8))
def test_decoding_a_list_is_decoding_each(items: list) -> None:
    """``decode_all`` (the lean replay path's payload loop) gives what ``decode`` gives for
    each payload, or raises ``PayloadError`` exactly when one of them does not decode."""
    payloads = []
    for obj, form, junk in items:
        data = FLAT.encode(obj)
        payloads.append(data if form == "ok" else data[:len(data) // 2] if form == "cut"
                        else junk)
    for ser in (FLAT, JsonSerializer(Flat)):
        each: list = []
        try:
            for p in (payloads if ser is FLAT else [JsonSerializer(Flat).encode(o)
                                                    for o, _, _ in items]):
                each.append(ser.decode(p))
        except PayloadError:
            each = None  # type: ignore[assignment]
        try:
            got = decode_all(ser, payloads if ser is FLAT else
                             [JsonSerializer(Flat).encode(o) for o, _, _ in items])
        except PayloadError:
            got = None  # type: ignore[assignment]
        assert got == each
