"""The peer's Send encoder, written by hand for the send path: sender and environment encoded
once, recipients and message types cached, and so is the current millisecond. Byte-identical
to fastavro (it checks itself when built; ``tests/property/wire`` checks it on arbitrary
records). :meth:`SendEncoder.bind` gives one message type's encoder, which encodes the
payload object and the Send around it in one call (``Peer.post``'s path)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
        #: the last timestamp and its encoding, one tuple swapped as one reference: a thread
        #: never pairs one send's millisecond with another's bytes
        self._ts: tuple[int, bytes] = (-1, b"")
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
        self._ts = (-1, b"")
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
        ts = self._ts
        if ts[0] != timestamp_ms:
            ts = self._ts = (timestamp_ms, zigzag_long(timestamp_ms))
        n = len(payload)
        names = self._names
        sender, env = self._sender_env
        mid = message_id.encode()
        m = len(mid)
        return b"".join((self._head, LENGTHS[m] if m < 8192 else zigzag_long(m), mid, sender,
                         names.get(recipient) or self._name(recipient), env,
                         names.get(message_type) or self._name(message_type),
                         LENGTHS[n] if n < 8192 else zigzag_long(n), payload, ts[1],
                         b"\x00\x00"))

    def bind(self, message_type: str, encode_payload: Callable[[Any], bytes]
             ) -> Callable[[Any, str, str, int], bytes]:
        """``encode(obj, message_id, recipient, timestamp_ms)``: the Send of one message of
        ``message_type`` whose payload is ``encode_payload(obj)``, the same bytes as
        :meth:`encode` writes for that payload, in one call (the send path's: one Python
        frame fewer per message, and the type's name encoded once). Errors of
        ``encode_payload`` pass through unchanged."""
        head, names, name = self._head, self._names, string_bytes(message_type)
        sender, env = self._sender_env
        lengths, long_bytes, tail = LENGTHS, zigzag_long, b"\x00\x00"

        def encode(obj: Any, message_id: str, recipient: str, timestamp_ms: int) -> bytes:
            payload = encode_payload(obj)
            ts = self._ts
            if ts[0] != timestamp_ms:
                ts = self._ts = (timestamp_ms, long_bytes(timestamp_ms))
            mid = message_id.encode()
            m, n = len(mid), len(payload)
            return b"".join((head, lengths[m] if m < 8192 else long_bytes(m), mid, sender,
                             names.get(recipient) or self._name(recipient), env, name,
                             lengths[n] if n < 8192 else long_bytes(n), payload, ts[1], tail))
        return encode
