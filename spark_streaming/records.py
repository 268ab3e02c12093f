"""Fast decoding of the txlog records the job reads (Send, Ack, Purge), byte-exact with the
codec: a flat Avro reader for the current writer schemas, falling back to
:meth:`log.codec.Codec.decode` for anything else (older writer schemas, poison records), so
errors and their reasons are the codec's own.

``fastavro``'s generic reader costs ~18 us per Send; the records of txlog are flat (strings,
bytes, ints, longs, ``["null", string]``), which a direct reader parses in a few us.
``tests/unit/test_spark_records.py`` checks it against the codec on arbitrary records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from log.codec import MARKER, Codec, Decoded, default_codec

__all__ = ["RecordReader"]

_HEADER = len(MARKER) + 8
_Field = tuple[str, str]  # (name, kind): string, bytes, int, long, boolean, ?string, ...


def _read_long(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    pos += 1
    n, shift = b & 0x7F, 7
    while b & 0x80:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def _flat_fields(schema: dict[str, Any]) -> list[_Field] | None:
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


def _compile(fields: list[_Field]) -> Callable[[bytes], dict[str, Any] | None]:
    """A reader function for one flat schema: straight-line code, one-byte varints inline."""
    lines = ["def read(buf):", "    pos, end = 10, len(buf)"]

    def varint(var: str, indent: str) -> None:
        lines.extend([f"{indent}b = buf[pos]",
                      f"{indent}if b < 0x80:",
                      f"{indent}    {var} = (b >> 1) ^ -(b & 1)",
                      f"{indent}    pos += 1",
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
    lines.append("    return {" + ", ".join(f"{n!r}: {v}" for n, v in names) + "}")
    scope: dict[str, Any] = {"read_long": _read_long}
    exec("\n".join(lines), scope)  # noqa: S102 - code generated from a schema, no input
    return scope["read"]  # type: ignore[no-any-return]


class RecordReader:
    """``decode(value)`` like the codec's, faster for the current Send/Ack/Purge schemas."""

    def __init__(self, codec: Codec | None = None,
                 names: tuple[str, ...] = ("Send", "Ack", "Purge")) -> None:
        self.codec = codec or default_codec()
        self._fast: dict[bytes, tuple[str, Callable[[bytes], dict[str, Any] | None]]] = {}
        for name in names:
            fields = _flat_fields(self.codec._named[name])
            if fields is not None:
                self._fast[MARKER + self.codec.fingerprint_of(name)] = (name, _compile(fields))

    def decode(self, value: bytes | None) -> Decoded:
        """The decoded record (raises the codec's :class:`~log.exceptions.CodecError`)."""
        if value is not None:
            fast = self._fast.get(value[:_HEADER])
            if fast is not None:
                try:
                    record = fast[1](value)
                except (IndexError, UnicodeDecodeError, ValueError):
                    record = None
                if record is not None:
                    return Decoded(fast[0], record)
        return self.codec.decode(value)
