"""Varints, the one module: the unsigned base-128 varint, Avro's zigzag longs and lengths,
written from tables on the hot paths and read back exactly as fastavro reads them.

Generated readers and the scanners inline the one- and two-byte cases and call
:func:`read_long` for the rest.
"""

from __future__ import annotations

__all__ = ["varint", "zigzag_long", "zigzag_int", "length_bytes", "LENGTHS", "read_long"]

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
#: Varints of 0..16383 (zigzag values of -8192..8191).
_VAR14 = [bytes((z,)) if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7)) for z in range(1 << 14)]
#: Avro lengths, i.e. zigzag varints of 0..8191 (1 or 2 bytes), by length.
LENGTHS = _VAR14[0::2]
#: The low 14 bits of a varint that goes on: two bytes with the continuation bit set.
_LOW14 = [bytes(((n & 0x7F) | 0x80, (n >> 7) | 0x80)) for n in range(1 << 14)]
#: The encoding of the bits above the low 14 of the last long encoded (timestamps share it
#: for 8 s): one tuple, swapped as one reference, so threads never see a torn pair.
_last_high: tuple[int, bytes] = (-1, b"")


def varint(n: int) -> bytes:
    """Unsigned base-128 varint of ``n >= 0`` (Avro after zigzag; protobuf's varint)."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zigzag_long(n: int) -> bytes:
    """Avro encoding of a long (range-checked zigzag varint)."""
    global _last_high
    if 0 <= n < 8192:
        return LENGTHS[n]
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise ValueError(f"{n} is out of range for an Avro long")
    z = (n << 1) ^ (n >> 63)
    high = z >> 14
    if not high:
        return _VAR14[z]
    last = _last_high
    if last[0] != high:
        last = _last_high = (high, varint(high))
    return _LOW14[z & 0x3FFF] + last[1]


def zigzag_int(n: int) -> bytes:
    """Avro encoding of an int (range-checked zigzag varint)."""
    if 0 <= n < 8192:
        return LENGTHS[n]
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{n} is out of range for an Avro int")
    return varint((n << 1) ^ (n >> 63))


def length_bytes(n: int) -> bytes:
    """A non-negative length (of bytes, a string, an array block) as Avro writes it: the
    zigzag varint of ``n`` (:func:`varint` is the unsigned one)."""
    return LENGTHS[n] if n < 8192 else zigzag_long(n)


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos``: ``(value, next position)``; IndexError when truncated.

    A corrupt varint past 64 bits reads as fastavro's C reader reads it: that reader shifts
    a 64-bit integer and the shift count wraps at 64 (x86), so byte 10 on lands in the low
    bits again."""
    b = buf[pos]
    pos += 1
    n, shift = b & 0x7F, 7
    while b & 0x80:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << (shift & 63)
        shift += 7
    if shift > 56:
        n &= 0xFFFFFFFFFFFFFFFF
    return (n >> 1) ^ -(n & 1), pos
