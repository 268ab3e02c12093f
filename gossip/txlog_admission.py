"""Which txlog records a queues job or a replica node applies: least privilege inside the log.

Whoever may write txlog can append any record. A reader therefore decides, per record:

1. **Environment.** A component runs for one environment (``Settings.environment``); a
   record of another one (a Send, an Ack, a Purge...) is not applied
   (:func:`environment_refusal`).
2. **Signer** (secure mode only). An AckBatch or a DeliveryFailed counts only when signed by
   the recipient itself, ``tidemark:peer:<environment>:<peer>``; a Purge only when signed by
   an operator (``tidemark:operator:<name>``); a single-id Ack carries no signature and never
   counts (:func:`signer_refusal`). Who signed is the
   :class:`~tidemark.gossip.record_signing.SignatureVerifier`'s answer.

Both decisions are pure functions returning a :class:`Refusal` (or None: apply it);
:class:`TxlogAdmission` combines them for one component. A refused record is dead-lettered
with the refusal's reason and counted by kind, never applied. In insecure mode (no CA
material: the process's transport resolved insecure) there is no verifier: signatures are
neither required nor checked, and the environment is still.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidemark.gossip.pki import Identity, PkiError
from tidemark.gossip.record_signing import SignatureRefused, SignatureVerifier
from tidemark.log.wire.signed import SIGNED_RECORDS, is_signed, signed_message

__all__ = ["ENVIRONMENT", "SIGNATURE", "Refusal", "TXLOG_RECORDS", "MUST_SIGN",
           "environment_refusal", "signer_refusal", "TxlogAdmission"]

#: Refusal kinds: the record's environment is not the component's; its signer is not who
#: may write it (or it is unsigned, or its signature does not check).
ENVIRONMENT, SIGNATURE = "environment", "signature"
#: The records that belong in txlog; each carries an ``environment``.
TXLOG_RECORDS = ("Send", "Ack", "AckBatch", "Purge", "DeliveryFailed")
#: The records that count only when signed (secure mode); ``Ack`` cannot be signed.
MUST_SIGN = ("Ack", *SIGNED_RECORDS)


@dataclass(frozen=True)
class Refusal:
    """Why a record is not applied: its ``kind`` (:data:`ENVIRONMENT`, :data:`SIGNATURE`)
    and a reason for the dead letter."""

    kind: str
    reason: str


def environment_refusal(name: str, record: Mapping[str, Any],
                        environment: str) -> Refusal | None:
    """None when txlog record ``name`` is of ``environment`` (or is no txlog record: other
    checks name that problem); else the refusal."""
    if name not in TXLOG_RECORDS:
        return None
    got = record.get("environment")
    if got == environment:
        return None
    return Refusal(ENVIRONMENT, f"{name} of environment {got!r}, not this component's"
                                f" {environment!r}")


def signer_refusal(name: str, record: Mapping[str, Any],
                   signer: Identity | None) -> Refusal | None:
    """None when ``signer`` (None: unsigned) may write txlog record ``name``: the peer itself
    for an AckBatch or a DeliveryFailed, an operator for a Purge; records outside
    :data:`MUST_SIGN` (Sends) need no signer. Else the refusal."""
    if name not in MUST_SIGN:
        return None
    if name == "Ack":
        return Refusal(SIGNATURE, "a single-id Ack cannot be signed: write AckBatch records")
    if signer is None:
        return Refusal(SIGNATURE, f"unsigned {name}")
    if name == "Purge":
        if signer.kind == "operator":
            return None
        return Refusal(SIGNATURE, f"Purge signed by {signer}, not by an operator")
    try:
        want: Identity | None = Identity("peer", str(record.get("peer", "")),
                                         str(record.get("environment", "")))
    except PkiError:  # a peer or environment no certificate can name
        want = None
    if want is not None and signer == want:
        return None
    return Refusal(SIGNATURE, f"{name} of peer {record.get('peer')!r} signed by {signer},"
                              " not by that peer")


class TxlogAdmission:
    """One component's admission of txlog records: its ``environment`` and, in secure mode,
    the ``verifier`` of signers (None: insecure, signatures not required)."""

    def __init__(self, environment: str, verifier: SignatureVerifier | None) -> None:
        self.environment = environment
        self.verifier = verifier

    @property
    def secure(self) -> bool:
        """Whether signatures are required."""
        return self.verifier is not None

    def check(self, name: str, record: Mapping[str, Any], value: bytes) -> Refusal | None:
        """None: apply decoded record ``name`` (encoded as ``value``); else why not."""
        refused = environment_refusal(name, record, self.environment)
        if refused is not None or self.verifier is None or name not in MUST_SIGN:
            return refused
        try:
            signer = self._signer(name, record, value)
        except SignatureRefused as exc:
            return Refusal(SIGNATURE, f"{name}: {exc}")
        return signer_refusal(name, record, signer)

    def _signer(self, name: str, record: Mapping[str, Any], value: bytes) -> Identity | None:
        if name not in SIGNED_RECORDS:
            return None
        signer, signature = record.get("signer") or b"", record.get("signature") or b""
        if not is_signed(signer, signature):
            return None
        assert self.verifier is not None
        message = signed_message(value, signer, signature)
        if message is None:
            raise SignatureRefused("the signature fields are not where a signer writes them")
        try:
            at_ms = int(record.get("timestamp_ms", 0))
        except (TypeError, ValueError):
            raise SignatureRefused("the record has no time to check the signer at") from None
        return self.verifier.signer(signer, signature, message, at_ms)
