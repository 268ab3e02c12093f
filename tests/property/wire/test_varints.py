"""The varint module (``log.wire.varints``) against fastavro: every long, int and length
written as fastavro writes it, and read back as fastavro reads it, corrupt varints too."""

from __future__ import annotations

import io
from collections.abc import Callable

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.log.wire import length_bytes, read_long, varint, zigzag_int, zigzag_long

longs = st.integers(-(1 << 63), (1 << 63) - 1)
ints = st.integers(-(1 << 31), (1 << 31) - 1)


def _fastavro(kind: str, value: int) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, {"type": kind}, value)
    return buf.getvalue()


@settings(max_examples=500, deadline=None)
@given(st.lists(longs | st.integers(-20_000, 20_000), min_size=1, max_size=5))
def test_longs_are_written_as_fastavro_writes_them(values: list[int]) -> None:
    for n in values + values:  # twice: the cached high bits of the previous long
        assert zigzag_long(n) == _fastavro("long", n)
        assert read_long(zigzag_long(n), 0) == (n, len(zigzag_long(n)))
        assert varint((n << 1) ^ (n >> 63)) == zigzag_long(n)


@settings(max_examples=300, deadline=None)
@given(ints, st.integers(0, 1 << 40))
def test_ints_and_lengths_are_written_as_fastavro_writes_them(n: int, length: int) -> None:
    assert zigzag_int(n) == _fastavro("int", n)
    assert length_bytes(length) == _fastavro("long", length)


@pytest.mark.parametrize("encode,bad", [(zigzag_long, 1 << 63), (zigzag_long, -(1 << 63) - 1),
                                        (zigzag_int, 1 << 31), (zigzag_int, -(1 << 31) - 1)])
def test_out_of_range_values_are_refused(encode: Callable[[int], bytes], bad: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode(bad)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0x80, 0xFF), max_size=13), st.integers(0, 0x7F))
def test_a_varint_of_any_length_reads_as_fastavro_reads_it(more: list[int], last: int) -> None:
    """Corrupt varints longer than 64 bits included: the readers and scanners must agree with
    the codec (fastavro's C reader) on them too, or a damaged record would read differently."""
    raw = bytes(more) + bytes([last])
    assert read_long(raw, 0) == (fastavro.schemaless_reader(io.BytesIO(raw), {"type": "long"}),
                                 len(raw))
