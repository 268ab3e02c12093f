"""Walking an Avro body without building Python objects: the strings of a record, and the
fields after a layout's last string (its long/int fields, then fields appended to the schema
with defaults). What the scanners (:mod:`tidemark.log.wire.scanners`,
:mod:`tidemark.log.wire.ack_batch_scanner`) are built from; each says None (or False) for
whatever it cannot vouch for, and the caller falls back to the codec."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidemark.log.wire.varints import read_long

__all__ = ["walk_strings", "tail_check", "appended_kind", "Tail", "Kind"]

_HIGH = bytes(range(0x80, 0x100))  # varint continuation bytes (deleted to count terminators)
#: A field kind after the base layout: "long", "int", "string", "bytes", "float", "double", or
#: a tuple of union branches among those and "null".
Kind = str | tuple[str, ...]
#: ``tail(value, position)``: whether ``value[position:]`` is exactly the trailing fields.
Tail = Callable[[bytes, int], bool]
_WALKABLE = {"null", "long", "int", "string", "bytes", "float", "double"}


def walk_strings(v: bytes, p: int, n: int) -> tuple[int, list[tuple[int, int]]] | None:
    """Walk ``n`` Avro strings from ``p``: ``(end, [(start, stop), ...])`` or None when a
    length is negative, the body is truncated or a string is not valid UTF-8."""
    spans = []
    ascii_seps = True
    for _ in range(n):
        b = v[p] if p < len(v) else -1
        if 0 <= b < 0x80 and not b & 1:
            start, p = p + 1, p + 1 + (b >> 1)
        else:
            try:
                size, start = read_long(v, p)
            except IndexError:
                return None
            if size < 0:
                return None
            ascii_seps = False
            p = start + size
        spans.append((start, p))
    if p > len(v):
        return None
    region = v[spans[0][0]:p] if spans else b""
    if not region.isascii():
        try:
            if ascii_seps:  # single-byte lengths are ASCII: the region decodes iff each does
                region.decode()
            else:
                for a, b2 in spans:
                    v[a:b2].decode()
        except UnicodeDecodeError:
            return None
    return p, spans


def _tail_ok(v: bytes, p: int, varints: int) -> bool:
    """Whether ``v[p:]`` is exactly ``varints`` complete varints (long/int fields)."""
    rest = v[p:]
    return (0 < len(rest) <= 10 * varints and rest[-1] < 0x80
            and len(rest.translate(None, _HIGH)) == varints)


def _walk_one(v: bytes, p: int, kind: Kind) -> int | None:
    """Position after one value of ``kind`` at ``p``, or None when it cannot vouch for it."""
    if isinstance(kind, tuple):
        index, p = read_long(v, p)
        if not 0 <= index < len(kind):
            return None
        kind = kind[index]
    if kind == "null":
        return p
    if kind in ("long", "int"):
        return read_long(v, p)[1]
    if kind == "float":
        return p + 4 if p + 4 <= len(v) else None
    if kind == "double":
        return p + 8 if p + 8 <= len(v) else None
    if kind == "string":
        walked = walk_strings(v, p, 1)
        return None if walked is None else walked[0]
    size, p = read_long(v, p)  # bytes
    return p + size if size >= 0 and p + size <= len(v) else None


def tail_check(varints: int, extras: tuple[Kind, ...]) -> Tail:
    """A check that ``v[p:]`` is exactly ``varints`` long/int fields followed by ``extras``.
    The common case (every extra a union whose first branch is null, holding null) is one
    ``translate`` over the varints plus a comparison with zero bytes."""
    lead = varints + next((i for i, k in enumerate(extras) if k not in ("long", "int")),
                          len(extras))
    rest_kinds = extras[lead - varints:]
    nulls = len(rest_kinds) if all(isinstance(k, tuple) and k[0] == "null"
                                   for k in rest_kinds) else -1
    zeros = b"\0" * max(nulls, 0)

    def walk(v: bytes, p: int) -> bool:
        try:
            for _ in range(lead):
                p = read_long(v, p)[1]
            for kind in rest_kinds:
                q = _walk_one(v, p, kind)
                if q is None:
                    return False
                p = q
        except IndexError:
            return False
        return p == len(v)

    if nulls == 0:
        return lambda v, p: _tail_ok(v, p, lead)
    if nulls < 0:
        return walk

    def check(v: bytes, p: int) -> bool:
        n = len(v) - nulls
        rest = v[p:n]
        if (0 < len(rest) <= 10 * lead and rest[-1] < 0x80 and v[n:] == zeros
                and len(rest.translate(None, _HIGH)) == lead):
            return True
        return walk(v, p)
    return check


def appended_kind(field: dict[str, Any]) -> Kind | None:
    """The walkable kind of an appended field, or None (it has no default, or a type the
    tail check does not walk)."""
    if "default" not in field:
        return None
    t = field["type"]
    if isinstance(t, str):
        return t if t in _WALKABLE and t != "null" else None
    if isinstance(t, list) and t and all(isinstance(b, str) and b in _WALKABLE for b in t):
        return tuple(t)
    return None
