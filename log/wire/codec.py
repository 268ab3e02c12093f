"""Avro single-object encoding: C3 01, the 8-byte CRC-64-AVRO fingerprint, the binary body."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from tidemark import schemas
from tidemark.log.exceptions import (
    BadMarkerError,
    CodecError,
    TruncatedRecordError,
    UnknownFingerprintError,
    UnknownSchemaError,
)
from tidemark.log.wire.encoders import compile_encoder

__all__ = ["MARKER", "HEADER_SIZE", "Decoded", "Codec", "default_codec", "schema_fingerprint"]

MARKER = b"\xc3\x01"
#: The marker and the fingerprint: what precedes the Avro body of every value.
HEADER_SIZE = len(MARKER) + 8


def schema_fingerprint(parsed: Mapping[str, Any]) -> bytes:
    """The 8-byte little-endian CRC-64-AVRO fingerprint of a parsed schema."""
    hex_digest = fingerprint(to_parsing_canonical_form(dict(parsed)), "CRC-64-AVRO")
    return bytes.fromhex(hex_digest)


@dataclass(frozen=True)
class Decoded:
    """A decoded value: the short schema name (``Send``, ``Ack`` ...) and the record."""

    name: str
    record: dict[str, Any]


class Codec:
    """Encodes and decodes records; knows every writer schema by its fingerprint.

    The current schemas from ``schemas/`` are both writer and reader schemas. Older writer
    schemas can be registered with :meth:`register_writer`; records they wrote are read into
    the current reader schema of the same name (Avro schema resolution).
    """

    def __init__(self, schema_json: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._named: dict[str, dict[str, Any]] = {}
        self._named_fp: dict[str, bytes] = {}
        self._headers: dict[str, bytes] = {}
        self._writers: dict[bytes, tuple[str, dict[str, Any]]] = {}
        self._fast: dict[str, Callable[[Mapping[str, Any]], bytes]] = {}
        #: top-level fields with defaults: what a record may leave out (fastavro needs them)
        self._defaults: dict[str, dict[str, Any]] = {}
        self._bytes_defaults: dict[str, list[tuple[str, bytes]]] = {}
        named_schemas: dict[str, Any] = {}
        for name, js in (schema_json or schemas.load_all()).items():
            parsed = cast(dict[str, Any], parse_schema(dict(js), named_schemas=named_schemas))
            fp = schema_fingerprint(parsed)
            self._named[name] = parsed
            self._named_fp[name] = fp
            self._headers[name] = MARKER + fp
            self._writers[fp] = (name, parsed)
            self._defaults[name] = {f["name"]: _default_value(f) for f in parsed["fields"]
                                    if "default" in f}
            self._bytes_defaults[name] = [(k, v) for k, v in self._defaults[name].items()
                                          if isinstance(v, bytes)]
            fast = compile_encoder(parsed, MARKER + fp)
            if fast is not None:
                self._fast[name] = fast

    @property
    def names(self) -> list[str]:
        """Short names of the current schemas."""
        return list(self._named)

    def schema(self, name: str) -> dict[str, Any]:
        """The parsed current schema called ``name``."""
        try:
            return self._named[name]
        except KeyError:
            raise UnknownSchemaError(f"no schema named {name!r}") from None

    def fingerprint_of(self, name: str) -> bytes:
        """The fingerprint of the current schema called ``name``."""
        try:
            return self._named_fp[name]
        except KeyError:
            raise UnknownSchemaError(f"no schema named {name!r}") from None

    def register_writer(self, name: str, schema_json: Mapping[str, Any]) -> bytes:
        """Accept records written with an older (or newer) version of schema ``name``."""
        if name not in self._named:
            raise UnknownSchemaError(f"no schema named {name!r}")
        parsed = cast(dict[str, Any], parse_schema(dict(schema_json), _write_hint=False))
        fp = schema_fingerprint(parsed)
        self._writers[fp] = (name, parsed)
        return fp

    def encode(self, name: str, record: Mapping[str, Any]) -> bytes:
        """The single-object encoding of ``record`` with the current schema ``name``."""
        fast = self._fast.get(name)
        if fast is not None:
            try:
                return fast(record)
            except (ValueError, TypeError, KeyError, AttributeError, UnicodeEncodeError) as exc:
                raise CodecError(f"cannot encode {name}: {exc!r}") from exc
        try:
            header = self._headers[name]
        except KeyError:
            raise UnknownSchemaError(f"no schema named {name!r}") from None
        defaults = self._defaults[name]
        if defaults and not defaults.keys() <= record.keys():
            record = {**defaults, **record}
        buf = io.BytesIO()
        buf.write(header)
        try:
            schemaless_writer(buf, self._named[name], record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CodecError(f"cannot encode {name}: {exc}") from exc
        return buf.getvalue()

    def encode_with_fastavro(self, name: str, record: Mapping[str, Any]) -> bytes:
        """The same encoding through fastavro's generic writer (the reference)."""
        defaults = self._defaults[name]
        if defaults and not defaults.keys() <= record.keys():
            record = {**defaults, **record}
        buf = io.BytesIO()
        buf.write(self._headers[name])
        schemaless_writer(buf, self._named[name], record)
        return buf.getvalue()

    def decode(self, data: bytes | None) -> Decoded:
        """Decode a value; raises a :class:`CodecError` subclass on any bad input."""
        if data is None or len(data) < HEADER_SIZE:
            if data is not None and data[:2] == MARKER[: len(data[:2])] and len(data) >= 2:
                raise TruncatedRecordError(f"value of {len(data)} bytes ends inside the header")
            raise BadMarkerError("value is not Avro single-object encoded (no C3 01 marker)")
        if data[:2] != MARKER:
            raise BadMarkerError(f"bad marker {data[:2].hex()}, expected c301")
        fp = bytes(data[2:HEADER_SIZE])
        try:
            name, writer = self._writers[fp]
        except KeyError:
            raise UnknownFingerprintError(fp) from None
        buf = io.BytesIO(data)
        buf.seek(HEADER_SIZE)
        reader = self._named[name]
        try:
            if writer is reader:
                record = schemaless_reader(buf, writer, None)
            else:
                record = schemaless_reader(buf, writer, reader)
                resolved = cast(dict[str, Any], record)
                for field, default in self._bytes_defaults[name]:
                    if isinstance(resolved.get(field), str):  # fastavro resolves JSON text
                        resolved[field] = default
        except Exception as exc:  # fastavro raises EOFError, ValueError, UnicodeDecodeError...
            raise TruncatedRecordError(f"corrupt or truncated {name} body: {exc!r}") from exc
        if buf.tell() != len(data):
            raise TruncatedRecordError(
                f"{len(data) - buf.tell()} trailing bytes after the {name} body")
        return Decoded(name, record)  # type: ignore[arg-type]


def _default_value(field: Mapping[str, Any]) -> Any:
    """A field's default as a Python value (Avro JSON writes a bytes default as text)."""
    default = field["default"]
    if field["type"] == "bytes" and isinstance(default, str):
        return default.encode("latin-1")
    return default


_DEFAULT: Codec | None = None


def default_codec() -> Codec:
    """A process-wide codec over ``schemas/`` (built once)."""
    global _DEFAULT
    if _DEFAULT is None:
        codec = Codec()
        for name, old in schemas.load_history():  # records written before a schema evolved
            codec.register_writer(name, old)
        _DEFAULT = codec
    return _DEFAULT
