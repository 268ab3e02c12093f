"""Payload serializers: Avro for dataclasses (the default), JSON, or your own.

A serializer has ``encode(obj) -> bytes`` and ``decode(data) -> obj``. The default for a
dataclass derives an Avro record schema from its type hints and writes the payload as Avro
single-object encoding (``C3 01``, the schema fingerprint, the body), like every other
Tidemark record: the receiver can tell a payload written with a schema it does not know
(an older or newer version of the type) and resolve it once that writer schema is registered
with :meth:`AvroSerializer.register_writer`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import json
import types
import typing
from collections.abc import Callable
from typing import Any, Protocol

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from tidemark.log.wire import (
    MARKER,
    compile_flat_reader,
    compile_object_encoder,
    compile_tuple_reader,
    schema_fingerprint,
)
from tidemark.peer_client.exceptions import MessageTypeError, PayloadError

__all__ = ["Serializer", "AvroSerializer", "JsonSerializer", "avro_schema_for", "decode_all"]

_HEADER = len(MARKER) + 8
_PRIMITIVES = {str: "string", bytes: "bytes", bool: "boolean", int: "long", float: "double"}


class Serializer(Protocol):
    """Turns a message object into payload bytes and back."""

    def encode(self, obj: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


def _avro_type(hint: Any, where: str, namespace: str, named: dict[type, str]) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint in _PRIMITIVES:
        return _PRIMITIVES[hint]
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return ["null", _avro_type(rest[0], where, namespace, named)]
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return {"type": "array", "items": _avro_type(args[0], where, namespace, named)}
    if origin is dict and args and args[0] is str:
        return {"type": "map", "values": _avro_type(args[1], where, namespace, named)}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if hint in named:
            return named[hint]
        named[hint] = f"{namespace}.{hint.__name__}" if namespace else hint.__name__
        return _record(hint, hint.__name__, namespace, named)
    raise MessageTypeError(f"{where}: type {hint!r} has no Avro mapping (use str, bytes, int,"
                           f" float, bool, Optional, list, dict[str, X], a dataclass, or"
                           f" register a serializer)")


def _record(cls: type, name: str, namespace: str, named: dict[type, str]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        spec: dict[str, Any] = {"name": f.name, "type": _avro_type(
            hints[f.name], f"{cls.__qualname__}.{f.name}", namespace, named)}
        nullable = isinstance(spec["type"], list) and spec["type"][0] == "null"
        if f.default is not dataclasses.MISSING and (
                (f.default is None and nullable) or (f.default is not None and not nullable
                                                     and isinstance(f.default, (str, int, float)))):
            spec["default"] = f.default
        fields.append(spec)
    out: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
    if namespace:
        out["namespace"] = namespace
    return out


def avro_schema_for(cls: type, wire_name: str) -> dict[str, Any]:
    """The Avro record schema of dataclass ``cls`` under the wire name ``a.b.Name``."""
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise MessageTypeError(f"{cls!r} is not a dataclass: register a serializer for it")
    namespace, _, name = wire_name.rpartition(".")
    return _record(cls, name, namespace, {cls: wire_name})


def _builder(hint: Any, text: bool = False) -> Callable[[Any], Any] | None:
    """A function turning decoded data into ``hint`` (None: keep as is); ``text``: bytes
    arrive as base64 strings (JSON)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is bytes and text:
        return lambda v: base64.b64decode(v, validate=True)
    if hint in _PRIMITIVES:
        return None
    if origin in (typing.Union, types.UnionType):
        opt = _builder(next(a for a in args if a is not type(None)), text)
        if opt is None:
            return None
        return lambda v: None if v is None else opt(v)
    if origin is list or origin is tuple:
        item = _builder(args[0], text)
        if origin is tuple:
            if item is None:
                return tuple
            return lambda v: tuple(item(x) for x in v)
        if item is None:
            return None
        return lambda v: [item(x) for x in v]
    if origin is dict:
        value = _builder(args[1], text)
        if value is None:
            return None
        return lambda v: {k: value(x) for k, x in v.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _object_builder(hint, text)
    return None


def _object_builder(cls: type, text: bool = False) -> Callable[[dict[str, Any]], Any]:
    hints = typing.get_type_hints(cls)
    convert: dict[str, Callable[[Any], Any]] = {}
    for f in dataclasses.fields(cls):
        fn = _builder(hints[f.name], text)
        if fn is not None:
            convert[f.name] = fn
    if not convert:
        return lambda d: cls(**d)

    def build(d: dict[str, Any]) -> Any:
        for k, fn in convert.items():
            if k in d:
                d[k] = fn(d[k])
        return cls(**d)
    return build


def _to_data(obj: Any, text: bool = False) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _to_data(getattr(obj, f.name), text) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_to_data(x, text) for x in obj]
    if isinstance(obj, dict):
        return {k: _to_data(v, text) for k, v in obj.items()}
    if text and isinstance(obj, (bytes, bytearray)):
        return base64.b64encode(obj).decode("ascii")
    return obj


def _positional(cls: type) -> bool:
    """Whether ``cls(*values)`` builds ``cls`` from its schema's field values in order:
    every field is an ``__init__`` argument and none needs converting."""
    hints = typing.get_type_hints(cls)
    return all(f.init and _builder(hints[f.name]) is None for f in dataclasses.fields(cls))


#: What encoding a payload raises for an object that does not fit its type (the serializers
#: turn it into a PayloadError; ``encode_exact`` lets it through).
ENCODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, UnicodeEncodeError)


class AvroSerializer:
    """Avro single-object payloads for a dataclass, schema derived from its type hints."""

    def __init__(self, cls: type, wire_name: str) -> None:
        self.cls = cls
        self.schema = avro_schema_for(cls, wire_name)
        self._parsed: dict[str, Any] = parse_schema(self.schema, _write_hint=False)  # type: ignore[assignment]
        self.fingerprint = schema_fingerprint(self._parsed)
        self._header = MARKER + self.fingerprint
        self._writers: dict[bytes, Any] = {self.fingerprint: self._parsed}
        self._build = _object_builder(cls)
        self._fast = compile_object_encoder(self._parsed, self._header)
        # a generated reader for a flat schema (~3x faster than fastavro's generic one)
        self._fast_read = compile_flat_reader(self._parsed)
        # ... and straight into the constructor's arguments when no field needs converting
        self._fast_args = compile_tuple_reader(self._parsed) if _positional(cls) else None
        self.encode = self._encode_fast if self._fast else self._encode_generic  # type: ignore[method-assign]
        #: ``encode`` for an object of exactly ``cls``, its errors unwrapped: for a caller
        #: that has checked the type and reports a failure itself (``Peer.post``'s path)
        self.encode_exact: Callable[[Any], bytes] = self._fast or self._encode_generic

    def _encode_fast(self, obj: Any) -> bytes:
        if type(obj) is not self.cls:
            raise PayloadError(f"expected {self.cls.__qualname__}, got {type(obj).__qualname__}")
        try:
            return self._fast(obj)  # type: ignore[misc]
        except ENCODE_ERRORS as exc:
            raise PayloadError(f"cannot encode {self.cls.__qualname__}: {exc}") from None

    def _encode_generic(self, obj: Any) -> bytes:
        if not isinstance(obj, self.cls):
            raise PayloadError(f"expected {self.cls.__qualname__}, got {type(obj).__qualname__}")
        buf = io.BytesIO()
        buf.write(self._header)
        try:
            schemaless_writer(buf, self._parsed, _to_data(obj))
        except ENCODE_ERRORS as exc:
            raise PayloadError(f"cannot encode {self.cls.__qualname__}: {exc}") from None
        return buf.getvalue()

    def encode(self, obj: Any) -> bytes:  # replaced per instance in __init__
        """Payload bytes of ``obj``."""
        return self._encode_generic(obj)

    def decode(self, data: bytes) -> Any:
        """The object a payload holds; :class:`PayloadError` on anything malformed."""
        args = self._fast_args
        if args is not None and data[:_HEADER] == self._header:
            try:
                values = args(data)
            except (IndexError, UnicodeDecodeError, ValueError):
                values = None  # damaged: the generic reader says why
            if values is not None:
                try:
                    return self.cls(*values)
                except (TypeError, ValueError) as exc:
                    raise PayloadError(f"payload does not fit {self.cls.__qualname__}:"
                                       f" {exc}") from None
        fast = self._fast_read
        if fast is not None and data[:_HEADER] == self._header:
            try:
                record: Any = fast(data)
            except (IndexError, UnicodeDecodeError, ValueError):
                record = None  # damaged: the generic reader says why
            if record is not None:
                try:
                    return self._build(record)
                except (TypeError, ValueError) as exc:
                    raise PayloadError(f"payload does not fit {self.cls.__qualname__}:"
                                       f" {exc}") from None
        if len(data) < _HEADER or data[:2] != MARKER:
            raise PayloadError("payload is not Avro single-object encoded")
        writer = self._writers.get(bytes(data[2:_HEADER]))
        if writer is None:
            raise PayloadError(f"payload written with unknown schema fingerprint"
                               f" {bytes(data[2:_HEADER]).hex()} (another version of the type?"
                               f" register its writer schema)")
        buf = io.BytesIO(data)
        buf.seek(_HEADER)
        try:
            record = schemaless_reader(buf, writer, None if writer is self._parsed
                                       else self._parsed)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds
            raise PayloadError(f"corrupt {self.cls.__qualname__} payload: {exc!r}") from None
        if buf.tell() != len(data):
            raise PayloadError(f"{len(data) - buf.tell()} trailing bytes after the"
                               f" {self.cls.__qualname__} payload")
        try:
            return self._build(record)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise PayloadError(f"payload does not fit {self.cls.__qualname__}: {exc}") from None

    def decode_many(self, payloads: list[bytes]) -> list[Any]:
        """:meth:`decode` of each payload, in one loop when they are all of the current
        schema and no field needs converting; raises :class:`PayloadError` on the first
        malformed one."""
        args: Any = self._fast_args
        cls, header = self.cls, self._header
        if args is None:
            return [self.decode(d) for d in payloads]
        try:
            return [cls(*args(d)) if d[:_HEADER] == header else self.decode(d)
                    for d in payloads]
        except (IndexError, UnicodeDecodeError, ValueError, TypeError):
            return [self.decode(d) for d in payloads]  # says which, and why

    def register_writer(self, schema: dict[str, Any]) -> bytes:
        """Accept payloads written with another version of the schema (Avro resolution)."""
        parsed: dict[str, Any] = parse_schema(dict(schema), _write_hint=False)  # type: ignore[assignment]
        fp = schema_fingerprint(parsed)
        self._writers[fp] = parsed
        return fp


def decode_all(serializer: Any, payloads: list[bytes]) -> list[Any]:
    """Every payload decoded by ``serializer`` (its ``decode_many`` when it has one);
    raises what decoding the first malformed one raises."""
    many = getattr(serializer, "decode_many", None)
    if many is not None:
        return list(many(payloads))
    decode = serializer.decode
    return [decode(d) for d in payloads]


class JsonSerializer:
    """UTF-8 JSON payloads for a dataclass (readable; slower and larger than Avro). Bytes
    fields travel as base64 strings; unknown keys are ignored, missing ones take defaults."""

    def __init__(self, cls: type) -> None:
        if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
            raise MessageTypeError(f"{cls!r} is not a dataclass: give a serializer for it")
        self.cls = cls
        self._build = _object_builder(cls, text=True)
        self._names = {f.name for f in dataclasses.fields(cls)}

    def encode(self, obj: Any) -> bytes:
        """Payload bytes of ``obj``."""
        if not isinstance(obj, self.cls):
            raise PayloadError(f"expected {self.cls.__qualname__}, got {type(obj).__qualname__}")
        try:
            return json.dumps(_to_data(obj, text=True), separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise PayloadError(f"cannot encode {self.cls.__qualname__}: {exc}") from None

    def decode(self, data: bytes) -> Any:
        """The object a payload holds; :class:`PayloadError` on anything malformed."""
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PayloadError(f"payload is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise PayloadError("JSON payload is not an object")
        try:
            return self._build({k: v for k, v in doc.items() if k in self._names})
        except (TypeError, ValueError, AttributeError, binascii.Error) as exc:
            raise PayloadError(f"payload does not fit {self.cls.__qualname__}: {exc}") from None
