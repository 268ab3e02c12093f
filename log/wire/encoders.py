"""Generated Avro encoders for flat records: from a dict (the codec's Send, Ack, Purge,
QueueEntry...) and from an object's attributes (the payloads of flat dataclasses).

``compile_encoder`` turns a parsed record schema whose fields are all ``string``, ``bytes``,
``int``, ``long``, ``boolean`` or a ``["null", one of those]`` union into one Python function
that joins the header and the field encodings in a single ``bytes.join``: about 2 µs for a
Send, against 5.6 µs with one helper call per field and more for a generic
``fastavro.schemaless_writer`` call. ``compile_object_encoder`` does the same from
attributes, ``double`` and ``float`` too. Other schemas get ``None`` (the caller uses
fastavro). Every generated encoder checks itself against fastavro when it is built and
raises ``RuntimeError`` if it differs
(:func:`tidemark.log.wire.selfcheck.require_same_as_fastavro`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from tidemark.log.wire.primitives import CHECKED_HELPERS, RECORD_HELPERS, field_kind
from tidemark.log.wire.selfcheck import require_same_as_fastavro
from tidemark.log.wire.varints import LENGTHS

__all__ = ["compile_encoder", "compile_object_encoder"]


def compile_encoder(schema: Mapping[str, Any], header: bytes
                    ) -> Callable[[Mapping[str, Any]], bytes] | None:
    """An encoder writing ``header`` + the Avro body of a record, or None if unsupported
    (``RuntimeError`` if it fails its self-check).

    Strings and bytes are written inline (their length from a table, no call per field);
    a length past the table (8 KiB and more) falls back to the same encoder written with
    one helper call per field.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        return None
    env: dict[str, Any] = {"_hdr": header, "_L": LENGTHS,
                           **{f"_{k}": v for k, v in RECORD_HELPERS.items()}}
    fast, slow = [], []
    for i, field in enumerate(schema["fields"]):
        kind = field_kind(field["type"])
        if kind is None or kind[0] not in RECORD_HELPERS:
            return None
        prim, nullable = kind
        if "default" in field:
            default = field["default"]
            if prim == "bytes" and isinstance(default, str):  # Avro JSON: code points 0-255
                default = default.encode("latin-1")
            env[f"_d{i}"] = default
            get = f"r.get({field['name']!r}, _d{i})"
        else:
            get = f"r[{field['name']!r}]"
        if nullable:
            code = f"(b'\\x00' if (v{i} := {get}) is None else b'\\x02' + _{prim}(v{i}))"
            fast.append(code)
            slow.append(code)
            continue
        slow.append(f"_{prim}({get})")
        if prim == "string":
            fast.append(f"_L[len(b{i} := {get}.encode('utf-8'))], b{i}")
        elif prim == "bytes":
            fast.append(f"_L[len(b{i} := {get})], b{i}")
        else:
            fast.append(f"_{prim}({get})")
    source = ("def slow(r):\n    return b''.join((_hdr, " + ", ".join(slow) + "))\n"
              "def encode(r):\n    try:\n        return b''.join((_hdr, " + ", ".join(fast)
              + "))\n    except IndexError:\n        return slow(r)\n")
    exec(compile(source, f"<avro encoder {schema.get('name')}>", "exec"), env)  # noqa: S102
    encode: Callable[[Mapping[str, Any]], bytes] = env["encode"]
    require_same_as_fastavro(encode, schema, header, "the generated record encoder")
    return encode


def compile_object_encoder(schema: dict[str, Any], header: bytes
                           ) -> Callable[[Any], bytes] | None:
    """``encode(obj)`` writing ``header`` + the Avro body from ``obj``'s attributes, for a
    record of primitive (or nullable primitive) fields; None for other schemas
    (``RuntimeError`` if it fails its self-check)."""
    if schema.get("type") != "record":
        return None
    env: dict[str, Any] = {"_hdr": header, "_L": LENGTHS,
                           **{f"_{k}": v for k, v in CHECKED_HELPERS.items()}}
    parts = []
    for i, field in enumerate(schema["fields"]):
        kind = field_kind(field["type"])
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
    require_same_as_fastavro(encode, schema, header, "the generated object encoder",
                             lambda r: SimpleNamespace(**r))
    return encode
