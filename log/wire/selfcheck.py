"""Construction-time self-checks of the hand-written and generated encoders: sample records
that take every field of a flat schema through each branch of an encoder, and whether an
encoder writes what fastavro writes for them, byte for byte."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tidemark.log.wire.primitives import field_kind

__all__ = ["sample_records", "same_as_fastavro", "require_same_as_fastavro"]

#: per primitive: values that reach every branch of the encoders (short and past the 8 KiB
#: length table, negative, multi-byte varints, non-ASCII text)
_SAMPLES: dict[str, tuple[Any, ...]] = {
    "string": ("", "é-1", "x" * 9000), "bytes": (b"", b"\x00\xff", b"y" * 9000),
    "int": (0, -3, 8191, 8192, -(1 << 31), (1 << 31) - 1),
    "long": (0, -1, 1 << 40, 1_764_000_000_000, -(1 << 63), (1 << 63) - 1),
    "boolean": (True, False), "double": (0.0, -1.5), "float": (0.5,)}


def sample_records(schema: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Records of a flat ``schema`` that together take every field through each of its sample
    values (and None for a nullable field): what the self-checks encode."""
    fields = [(f["name"], field_kind(f["type"])) for f in schema.get("fields", ())]
    if any(kind is None for _, kind in fields):
        return
    width = max((len(_SAMPLES[k[0]]) + k[1] for _, k in fields if k), default=1)
    for i in range(width):
        rec: dict[str, Any] = {}
        for name, kind in fields:
            assert kind is not None
            values = _SAMPLES[kind[0]] + ((None,) if kind[1] else ())
            rec[name] = values[i % len(values)]
        yield rec


def same_as_fastavro(encode: Callable[[Any], bytes], schema: Mapping[str, Any], header: bytes,
                     adapt: Callable[[dict[str, Any]], Any] = lambda r: r,
                     fixed: Mapping[str, Any] | None = None) -> bool:
    """Whether ``encode(adapt(record))`` is ``header`` + fastavro's body, byte for byte, for
    every :func:`sample_records` record of ``schema`` (a parsed schema; ``fixed`` fields set
    to the values given). False also when there is no sample (a schema that is not flat)."""
    from fastavro import schemaless_writer
    checked = 0
    for sample in sample_records(schema):
        rec = {**sample, **(fixed or {})}
        checked += 1
        buf = io.BytesIO()
        buf.write(header)
        try:
            schemaless_writer(buf, dict(schema), rec)
            if encode(adapt(rec)) != buf.getvalue():
                return False
        except (TypeError, ValueError, OverflowError):
            return False  # a sample one of the two cannot write: nothing shown equal
    return checked > 0


def require_same_as_fastavro(encode: Callable[[Any], bytes], schema: Mapping[str, Any],
                             header: bytes, what: str,
                             adapt: Callable[[dict[str, Any]], Any] = lambda r: r) -> None:
    """:func:`same_as_fastavro`, raising ``RuntimeError`` (naming ``what`` and the schema) if
    not: an encoder that disagrees with fastavro is never used."""
    if not same_as_fastavro(encode, schema, header, adapt):
        raise RuntimeError(f"{what} for {schema.get('name')} does not write what fastavro"
                           " writes")
