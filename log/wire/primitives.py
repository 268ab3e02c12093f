"""Avro encodings of one primitive value, and which primitive a record field holds: the
parts the generated encoders (:mod:`tidemark.log.wire.encoders`) and the hand-written ones
are built from."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from tidemark.log.wire.varints import LENGTHS, zigzag_int, zigzag_long

__all__ = ["string_bytes", "bytes_bytes", "boolean_bytes", "field_kind", "RECORD_HELPERS",
           "CHECKED_HELPERS"]

_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack


def bytes_bytes(b: bytes) -> bytes:
    """Length-prefixed bytes."""
    n = len(b)
    return (LENGTHS[n] if n < 8192 else zigzag_long(n)) + b


def string_bytes(s: str) -> bytes:
    """Length-prefixed UTF-8."""
    return bytes_bytes(s.encode("utf-8"))


def boolean_bytes(v: bool) -> bytes:
    """One byte, 1 or 0 (TypeError for anything but a bool)."""
    if v is True:
        return b"\x01"
    if v is False:
        return b"\x00"
    raise TypeError(f"{v!r} is not a boolean")


def _double(v: float) -> bytes:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise TypeError(f"{v!r} is not a number")
    return _DOUBLE(v)


def _float(v: float) -> bytes:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise TypeError(f"{v!r} is not a number")
    return _FLOAT(v)


def _bytes_checked(v: bytes) -> bytes:
    if not isinstance(v, (bytes, bytearray)):
        raise TypeError(f"{type(v).__name__} is not bytes")
    return bytes_bytes(bytes(v))


def _string_checked(v: str) -> bytes:
    if not isinstance(v, str):
        raise TypeError(f"{type(v).__name__} is not a string")
    return string_bytes(v)


def _long_checked(v: int) -> bytes:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{v!r} is not an integer")
    return zigzag_long(v)


def _int_checked(v: int) -> bytes:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{v!r} is not an integer")
    return zigzag_int(v)


#: Per primitive, the encoding of a record's (dict's) field: a wrong type fails as Python
#: fails on it (the codec turns that into a ``CodecError``).
RECORD_HELPERS: dict[str, Callable[[Any], bytes]] = {
    "string": string_bytes, "bytes": bytes_bytes, "int": zigzag_int, "long": zigzag_long,
    "boolean": boolean_bytes}
#: Per primitive, the encoding of an object's attribute, type-checked (a TypeError names it).
CHECKED_HELPERS: dict[str, Callable[[Any], bytes]] = {
    "string": _string_checked, "bytes": _bytes_checked, "int": _int_checked,
    "long": _long_checked, "boolean": boolean_bytes, "double": _double, "float": _float}


def field_kind(ftype: Any) -> tuple[str, bool] | None:
    """``(primitive, nullable)`` of a field type that is one of the primitives above (bare,
    as ``{"type": primitive}`` or as ``["null", primitive]``), else None."""
    if isinstance(ftype, dict) and len(ftype) == 1 and isinstance(ftype.get("type"), str):
        ftype = ftype["type"]
    if isinstance(ftype, str) and ftype in CHECKED_HELPERS:
        return ftype, False
    if isinstance(ftype, list) and len(ftype) == 2 and ftype[0] == "null" \
            and isinstance(ftype[1], str) and ftype[1] in CHECKED_HELPERS:
        return ftype[1], True
    return None
