"""The peer's Send encoder, written by hand for the send path: sender and environment encoded
once, recipients and message types cached, and so is the current millisecond. Byte-identical
to fastavro (it checks itself when built; ``tests/property/wire`` checks it on arbitrary
records)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidemark.log.wire.primitives import string_bytes
from tidemark.log.wire.selfcheck import same_as_fastavro
from tidemark.log.wire.varints import LENGTHS, zigzag_long

__all__ = ["SendEncoder"]


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
            self._ts, self._ts_bytes = timestamp_ms, zigzag_long(timestamp_ms)
        n = len(payload)
        names = self._names
        sender, env = self._sender_env
        mid = message_id.encode()
        m = len(mid)
        return b"".join((self._head, LENGTHS[m] if m < 8192 else zigzag_long(m), mid, sender,
                         names.get(recipient) or self._name(recipient), env,
                         names.get(message_type) or self._name(message_type),
                         LENGTHS[n] if n < 8192 else zigzag_long(n), payload, self._ts_bytes,
                         b"\x00\x00"))
