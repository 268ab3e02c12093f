"""Fast Avro encoding for the send path: varints from a table, generated encoders that read
attributes (message objects) and a Send encoder with cached constant fields. Byte-identical
to fastavro (``tests/property/test_peer_serializers.py`` checks it)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from tidemark.log.fast_encoder import LENGTHS as _SMALL
from tidemark.log.fast_encoder import same_as_fastavro, zigzag_long

__all__ = ["length_bytes", "long_bytes", "string_bytes", "bytes_bytes", "compile_object_encoder",
           "SendEncoder"]

_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack


#: Zigzag varint of a long (range-checked): the log's encoder (tables, cached high bits).
long_bytes = zigzag_long


def int_bytes(n: int) -> bytes:
    """Zigzag varint of an int (range-checked)."""
    if not -(1 << 31) <= n < (1 << 31):
        raise ValueError(f"{n} is out of range for an Avro int")
    return long_bytes(n)


def length_bytes(n: int) -> bytes:
    """A non-negative length (of bytes, a string, an array block) as Avro writes it: the
    zigzag varint of ``n`` (:func:`tidemark.log.fast_encoder.varint` is the unsigned one)."""
    return _SMALL[n] if n < 8192 else long_bytes(n)


def bytes_bytes(b: bytes) -> bytes:
    """Length-prefixed bytes."""
    n = len(b)
    return (_SMALL[n] if n < 8192 else long_bytes(n)) + b


def string_bytes(s: str) -> bytes:
    """Length-prefixed UTF-8."""
    return bytes_bytes(s.encode("utf-8"))


def _boolean(v: bool) -> bytes:
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
    return long_bytes(v)


def _int_checked(v: int) -> bytes:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{v!r} is not an integer")
    return int_bytes(v)


_HELPERS: dict[str, Callable[[Any], bytes]] = {
    "string": _string_checked, "bytes": _bytes_checked, "int": _int_checked,
    "long": _long_checked, "boolean": _boolean, "double": _double, "float": _float}


def _kind(ftype: Any) -> tuple[str, bool] | None:
    if isinstance(ftype, str) and ftype in _HELPERS:
        return ftype, False
    if isinstance(ftype, dict) and ftype.get("type") in _HELPERS and len(ftype) == 1:
        return ftype["type"], False
    if isinstance(ftype, list) and len(ftype) == 2 and ftype[0] == "null" \
            and isinstance(ftype[1], str) and ftype[1] in _HELPERS:
        return ftype[1], True
    return None


def compile_object_encoder(schema: dict[str, Any], header: bytes
                           ) -> Callable[[Any], bytes] | None:
    """``encode(obj)`` writing ``header`` + the Avro body from ``obj``'s attributes, for a
    record of primitive (or nullable primitive) fields; None for other schemas."""
    if schema.get("type") != "record":
        return None
    env: dict[str, Any] = {"_hdr": header, "_L": _SMALL,
                           **{f"_{k}": v for k, v in _HELPERS.items()}}
    parts = []
    for i, field in enumerate(schema["fields"]):
        kind = _kind(field["type"])
        if kind is None or not field["name"].isidentifier():
            return None
        prim, nullable = kind
        get = f"o.{field['name']}"
        if nullable:
            parts.append(f"(b'\\x00' if (v{i} := {get}) is None else b'\\x02' + _{prim}(v{i}))")
        elif prim == "bytes":  # inline when it is bytes and short; the helper checks the rest
            parts.append(f"(_L[len(v{i})] + v{i} if type(v{i} := {get}) is bytes"
                         f" and len(v{i}) < 8192 else _bytes(v{i}))")
        elif prim == "string":
            parts.append(f"(_L[len(b{i})] + b{i} if type(v{i} := {get}) is str"
                         f" and len(b{i} := v{i}.encode()) < 8192 else _string(v{i}))")
        else:
            parts.append(f"_{prim}({get})")
    source = "def encode(o):\n    return b''.join((_hdr, " + ", ".join(parts) + "))\n"
    exec(compile(source, f"<object encoder {schema.get('name')}>", "exec"), env)  # noqa: S102
    encode: Callable[[Any], bytes] = env["encode"]
    # self-check: one that disagrees with fastavro is not used (the serializer falls back)
    ok = same_as_fastavro(encode, schema, header, lambda r: SimpleNamespace(**r))
    return encode if ok else None


class SendEncoder:
    """Encodes this peer's Send records: sender and environment are constant, recipients and
    message types are cached, and so is the current millisecond.

    Written by hand for the hot path, so it checks itself when built: it must write what
    fastavro writes for the parsed Send ``schema`` (``header`` + body) on sample records, or
    it raises ``RuntimeError`` (the schema changed and this encoder was not)."""

    def __init__(self, header: bytes, sender: str, environment: str,
                 schema: Mapping[str, Any]) -> None:
        self._head = header
        self._sender_env = (string_bytes(sender), string_bytes(environment))
        self._names: dict[str, bytes] = {}
        self._ts, self._ts_bytes = -1, b""
        self._check(schema, sender, environment)

    def _check(self, schema: Mapping[str, Any], sender: str, environment: str) -> None:
        fixed = {"sender": sender, "environment": environment, "delivery_count": 0,
                 "direct_incarnation": None}

        def encode(r: dict[str, Any]) -> bytes:
            return self.encode(r["message_id"], r["recipient"], r["message_type"],
                               r["payload"], r["timestamp_ms"])

        names = {f["name"] for f in schema.get("fields", ())}
        ok = fixed.keys() <= names and same_as_fastavro(encode, schema, self._head,
                                                        fixed=fixed)
        self._names.clear()
        self._ts, self._ts_bytes = -1, b""
        if not ok:
            raise RuntimeError("SendEncoder does not write what fastavro writes for the Send"
                               f" schema (fields {sorted(names)}): update it with the schema")

    def _name(self, s: str) -> bytes:
        b = self._names.get(s)
        if b is None:
            b = string_bytes(s)
            if len(self._names) < 100_000:
                self._names[s] = b
        return b

    def encode(self, message_id: str, recipient: str, message_type: str, payload: bytes,
               timestamp_ms: int) -> bytes:
        """The Send record, ``delivery_count`` 0 and ``direct_incarnation`` null."""
        if timestamp_ms != self._ts:
            self._ts, self._ts_bytes = timestamp_ms, long_bytes(timestamp_ms)
        n = len(payload)
        names = self._names
        sender, env = self._sender_env
        mid = message_id.encode()
        m = len(mid)
        return b"".join((self._head, _SMALL[m] if m < 8192 else long_bytes(m), mid, sender,
                         names.get(recipient) or self._name(recipient), env,
                         names.get(message_type) or self._name(message_type),
                         _SMALL[n] if n < 8192 else long_bytes(n), payload, self._ts_bytes,
                         b"\x00\x00"))
