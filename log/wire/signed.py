"""The wire side of signed txlog records (AckBatch, Purge, DeliveryFailed): what is signed, and
how a signature is put on an encoded record.

Each of the three schemas ends with two ``bytes`` fields with empty defaults, ``signer`` (the
writer's certificate, DER) and ``signature``. A record is signed over
:data:`SIGNATURE_CONTEXT` followed by its single-object encoding (marker, fingerprint, body)
*up to* the ``signer`` field. So a writer encodes the record with both fields empty (the value
then ends with the two bytes ``00 00``), signs everything before them, and writes the two
fields in their place (:func:`seal`); a reader cuts the value at the same place
(:func:`signed_message`) without encoding anything again. The cryptography (keys,
certificates, who may sign what) is :mod:`tidemark.gossip.record_signing`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from tidemark.log.wire.varints import length_bytes

__all__ = ["SIGNATURE_CONTEXT", "SIGNED_RECORDS", "Sealer", "signed_prefix", "seal",
           "signed_message", "is_signed"]

#: Prepended to what is signed, so that a signature over a txlog record cannot stand for
#: anything else made with the same key (TLS signs with context strings of its own).
SIGNATURE_CONTEXT = b"tidemark txlog record v1\x00"
#: The txlog records that carry ``signer`` and ``signature``.
SIGNED_RECORDS = ("AckBatch", "Purge", "DeliveryFailed")
#: ``seal(unsigned value) -> signed value``: a writer's signing step (see :func:`seal`).
Sealer = Callable[[bytes], bytes]
_EMPTY_TAIL = b"\x00\x00"  # signer and signature, both empty


def signed_prefix(unsigned: bytes) -> bytes:
    """The part of ``unsigned`` (a record encoded with empty ``signer`` and ``signature``)
    that its signature covers; raises ``ValueError`` if it does not end with them."""
    if unsigned[-2:] != _EMPTY_TAIL:
        raise ValueError("not an unsigned record: it does not end with two empty bytes fields")
    return unsigned[:-2]


def seal(unsigned: bytes, signer: bytes, sign: Callable[[bytes], bytes]) -> bytes:
    """``unsigned`` (encoded with empty ``signer`` and ``signature``) with ``signer`` and
    ``sign(SIGNATURE_CONTEXT + prefix)`` in place of the two empty fields."""
    prefix = signed_prefix(unsigned)
    signature = sign(SIGNATURE_CONTEXT + prefix)
    return b"".join((prefix, length_bytes(len(signer)), signer,
                     length_bytes(len(signature)), signature))


def signed_message(value: bytes, signer: bytes, signature: bytes) -> bytes | None:
    """What the signature of ``value`` must cover, given the ``signer`` and ``signature``
    its decoding holds: :data:`SIGNATURE_CONTEXT` and the bytes before the ``signer`` field.
    None when ``value`` does not end with exactly those two fields as a writer encodes them
    (minimal length varints): such a value is not one :func:`seal` made."""
    tail = b"".join((length_bytes(len(signer)), signer, length_bytes(len(signature)),
                     signature))
    if len(value) < len(tail) or not value.endswith(tail):
        return None
    return SIGNATURE_CONTEXT + value[:len(value) - len(tail)]


def is_signed(signer: bytes, signature: bytes) -> bool:
    """Whether a decoded record carries a signature at all."""
    return bool(signer) and bool(signature)
