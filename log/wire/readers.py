"""Fast decoding of flat records, byte-exact with the codec: a straight-line Avro reader for the
current writer schemas, falling back to :meth:`tidemark.log.wire.codec.Codec.decode` for
anything else (older writer schemas, poison records), so errors and their reasons are the
codec's own.

``fastavro``'s generic reader costs ~14-18 us per Send or QueueEntry; these records are flat
(strings, bytes, ints, longs, booleans, ``["null", X]``), which a generated reader parses in
a few us. Used by the queues job (txlog records), by the peer's replay (QueueEntry) and by
payload decoding of flat dataclasses (:func:`compile_flat_reader`).
``tests/property/wire/test_readers.py`` checks it against the codec on arbitrary records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tidemark.log.wire.codec import HEADER_SIZE, MARKER, Codec, Decoded, default_codec
from tidemark.log.wire.varints import read_long

__all__ = ["RecordReader", "FlatReader", "flat_fields", "compile_flat_reader",
           "compile_tuple_reader"]

_Field = tuple[str, str]  # (name, kind): string, bytes, int, long, boolean, ?string, ...
#: reads a whole value (header included); None if the body is not exactly one record
FlatReader = Callable[[bytes], "dict[str, Any] | None"]


def flat_fields(schema: Mapping[str, Any]) -> list[_Field] | None:
    """``(name, kind)`` of a flat record schema, or None if a field is not flat."""
    out = []
    for f in schema.get("fields", []):
        t = f["type"]
        if isinstance(t, str) and t in ("string", "bytes", "int", "long", "boolean"):
            out.append((f["name"], t))
        elif isinstance(t, list) and len(t) == 2 and t[0] == "null" \
                and t[1] in ("string", "bytes", "int", "long"):
            out.append((f["name"], "?" + t[1]))
        else:
            return None
    return out


def _compile(fields: list[_Field], header: int = HEADER_SIZE, as_tuple: bool = False) -> Any:
    """A reader function for one flat schema: straight-line code, varints of one or two
    bytes inline.
    It returns the record as a dict, or (``as_tuple``) its field values in schema order."""
    lines = ["def read(buf):", f"    pos, end = {header}, len(buf)"]

    def varint(var: str, indent: str) -> None:
        lines.extend([f"{indent}b = buf[pos]",
                      f"{indent}if b < 0x80:",
                      f"{indent}    {var} = (b >> 1) ^ -(b & 1)",
                      f"{indent}    pos += 1",
                      f"{indent}elif buf[pos + 1] < 0x80:",  # two bytes: lengths, offsets
                      f"{indent}    b = (b & 0x7F) | (buf[pos + 1] << 7)",
                      f"{indent}    {var} = (b >> 1) ^ -(b & 1)",
                      f"{indent}    pos += 2",
                      f"{indent}else:",
                      f"{indent}    {var}, pos = read_long(buf, pos)"])

    names = []
    for i, (name, kind) in enumerate(fields):
        var, indent = f"f{i}", "    "
        names.append((name, var))
        if kind[0] == "?":
            varint("branch", indent)
            lines.extend([f"{indent}if branch == 0:", f"{indent}    {var} = None",
                          f"{indent}elif branch != 1:", f"{indent}    return None",
                          f"{indent}else:"])
            indent += "    "
            kind = kind[1:]
        if kind in ("string", "bytes"):
            varint("n", indent)
            lines.extend([f"{indent}if n < 0 or pos + n > end:", f"{indent}    return None",
                          f"{indent}{var} = buf[pos:pos + n]"
                          + (".decode()" if kind == "string" else ""),
                          f"{indent}pos += n"])
        elif kind == "boolean":
            lines.extend([f"{indent}if buf[pos] > 1:", f"{indent}    return None",
                          f"{indent}{var} = buf[pos] == 1", f"{indent}pos += 1"])
        else:
            varint(var, indent)
    lines.append("    if pos != end:")
    lines.append("        return None")
    if as_tuple:
        lines.append("    return (" + "".join(f"{v}, " for _, v in names) + ")")
    else:
        lines.append("    return {" + ", ".join(f"{n!r}: {v}" for n, v in names) + "}")
    scope: dict[str, Any] = {"read_long": read_long}
    exec("\n".join(lines), scope)  # noqa: S102 - code generated from a schema, no input
    return scope["read"]  # type: ignore[no-any-return]


def compile_flat_reader(schema: Mapping[str, Any], header: int = HEADER_SIZE) -> FlatReader | None:
    """A reader of ``header`` bytes then one record of the flat ``schema`` (None: not flat).
    It returns None for a body it cannot read exactly, and may raise IndexError,
    UnicodeDecodeError or ValueError on a damaged one: the caller falls back to fastavro."""
    fields = flat_fields(schema)
    return None if fields is None else _compile(fields, header)  # type: ignore[no-any-return]


def compile_tuple_reader(schema: Mapping[str, Any], header: int = HEADER_SIZE
                         ) -> Callable[[bytes], "tuple[Any, ...] | None"] | None:
    """:func:`compile_flat_reader` returning the field values in schema order as a tuple
    (no dict built): for a hot path that knows the field order."""
    fields = flat_fields(schema)
    return None if fields is None else _compile(fields, header, True)  # type: ignore[no-any-return]


class RecordReader:
    """``decode(value)`` like the codec's, faster for the flat schemas ``names``."""

    def __init__(self, codec: Codec | None = None,
                 names: tuple[str, ...] = ("Send", "Ack", "Purge")) -> None:
        self.codec = codec or default_codec()
        self._fast: dict[bytes, tuple[str, FlatReader]] = {}
        for name in names:
            read = compile_flat_reader(self.codec.schema(name))
            if read is not None:
                self._fast[MARKER + self.codec.fingerprint_of(name)] = (name, read)

    def read(self, value: bytes | None) -> dict[str, Any] | None:
        """The record of a current-schema value, or None (use :meth:`decode` then)."""
        if value is not None:
            fast = self._fast.get(value[:HEADER_SIZE])
            if fast is not None:
                try:
                    return fast[1](value)
                except (IndexError, UnicodeDecodeError, ValueError):
                    return None
        return None

    def decode(self, value: bytes | None) -> Decoded:
        """The decoded record (raises the codec's :class:`~tidemark.log.exceptions.CodecError`)."""
        if value is not None:
            fast = self._fast.get(value[:HEADER_SIZE])
            if fast is not None:
                try:
                    record = fast[1](value)
                except (IndexError, UnicodeDecodeError, ValueError):
                    record = None
                if record is not None:
                    return Decoded(fast[0], record)
        return self.codec.decode(value)
