"""Signing txlog records with a process's TLS key, and checking who signed one.

An AckBatch, a Purge and a DeliveryFailed carry their writer's certificate (``signer``, DER)
and a signature by the matching key (:mod:`tidemark.log.wire.signed` says which bytes). A
:class:`RecordSigner` is one identity's certificate and key (a peer's or an operator's
transport files); :class:`SignatureVerifier` tells, for a signed record, which identity signed
it, or why it cannot tell: the certificate does not chain to a trusted CA (several are trusted
during a rotation), is outside its validity dates at the time the record says it was written,
is revoked, or the signature does not match. Who may sign what is
:mod:`tidemark.gossip.txlog_admission`'s decision.

Certificate checks are cached by the certificate's bytes (one check per writer, not per
record); revocation is looked up at every record, against the serials the verifier was last
given (:meth:`SignatureVerifier.refresh_crl` re-reads a CRL file when it changed). Only the
``cryptography`` package does cryptography here.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tidemark.gossip.pki import Identity, PkiError, TlsFiles, issue, revoked_serials
from tidemark.gossip.tls import Transport, local_pki_dir
from tidemark.log import registry
from tidemark.log.wire.signed import Sealer, seal

__all__ = ["RecordSigner", "SignatureVerifier", "SignatureRefused", "IssuerSigners",
           "load_trusted", "sealer_of", "verifier_of", "issuer_signers", "load_sealers"]

_CACHE_LIMIT = 4096


class SignatureRefused(PkiError):
    """A record's signature does not establish who wrote it (the message says why)."""


def _identity_of(cert: x509.Certificate) -> Identity:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise PkiError("certificate has no subject alternative name") from None
    for uri in san.get_values_for_type(x509.UniformResourceIdentifier):
        if uri.startswith("tidemark:"):
            return Identity.parse(uri)
    raise PkiError("certificate names no Tidemark identity")


class RecordSigner:
    """One identity's certificate and EC private key: signs the records it writes."""

    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        self.certificate = cert.public_bytes(serialization.Encoding.DER)
        self.identity = _identity_of(cert)
        self._key = key

    @classmethod
    def from_files(cls, files: TlsFiles) -> RecordSigner:
        """The signer of a process's TLS files (its certificate and key)."""
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        key = serialization.load_pem_private_key(files.key.read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise PkiError(f"{files.key} is not an EC key")
        return cls(cert, key)

    def sign(self, message: bytes) -> bytes:
        """ECDSA with SHA-256 over ``message`` (DER signature)."""
        return self._key.sign(message, ec.ECDSA(hashes.SHA256()))

    def seal(self, unsigned: bytes) -> bytes:
        """``unsigned`` (a record encoded with empty ``signer`` and ``signature``), signed."""
        return seal(unsigned, self.certificate, self.sign)

    @property
    def sealer(self) -> Sealer:
        """:meth:`seal`, as the writers take it."""
        return self.seal


@dataclass(frozen=True)
class _Checked:
    """A certificate that chains to a trusted CA: who it is and what bounds its use."""

    identity: Identity
    serial: int
    key: ec.EllipticCurvePublicKey
    not_before_ms: int
    not_after_ms: int


def _ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


def load_trusted(pem: bytes) -> list[x509.Certificate]:
    """The CA certificates of a trust bundle (``trust.pem``: one or more, during rotation)."""
    return list(x509.load_pem_x509_certificates(pem))


class SignatureVerifier:
    """Who signed a record: certificates checked once (cached by their bytes) against the
    trusted CAs; validity dates at the record's own time; revocation at every record."""

    def __init__(self, trusted: Iterable[x509.Certificate],
                 revoked: Iterable[int] = (), crl: Path | None = None) -> None:
        self._cas = list(trusted)
        if not self._cas:
            raise PkiError("no trusted CA: a verifier needs the cluster's CA bundle")
        self._revoked = frozenset(revoked)
        self._crl, self._crl_mtime = crl, -1.0
        self._cache: dict[bytes, _Checked | str] = {}
        self._lock = threading.Lock()
        self.refresh_crl()

    @classmethod
    def from_files(cls, ca: Path, crl: Path | None = None) -> SignatureVerifier:
        """A verifier trusting the CAs of bundle ``ca``, revoking what ``crl`` lists."""
        return cls(load_trusted(ca.read_bytes()), crl=crl)

    def refresh_crl(self) -> None:
        """Re-read the CRL file if it changed (an unreadable file keeps the last serials)."""
        if self._crl is None:
            return
        try:
            mtime = self._crl.stat().st_mtime
            if mtime != self._crl_mtime:
                self._revoked = frozenset(revoked_serials(self._crl))
                self._crl_mtime = mtime
        except (OSError, ValueError):
            pass

    def _check_certificate(self, der: bytes) -> _Checked | str:
        try:
            cert = x509.load_der_x509_certificate(der)
        except ValueError:
            return "the signer is not a DER certificate"
        try:
            identity = _identity_of(cert)
        except PkiError as exc:
            return f"signer certificate: {exc}"
        key = cert.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey):
            return f"signer certificate of {identity} has no EC key"
        for ca in self._cas:
            if ca.subject != cert.issuer:
                continue
            try:
                cert.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                continue
            before = max(cert.not_valid_before_utc, ca.not_valid_before_utc)
            after = min(cert.not_valid_after_utc, ca.not_valid_after_utc)
            return _Checked(identity, cert.serial_number, key, _ms(before), _ms(after))
        return f"signer certificate of {identity} is not issued by a trusted CA"

    def signer(self, certificate: bytes, signature: bytes, message: bytes,
               at_ms: int) -> Identity:
        """The identity that signed ``message`` with ``signature`` under ``certificate``,
        which must have been valid at ``at_ms`` (the record's own, signed, time). Raises
        :class:`SignatureRefused` with the reason otherwise."""
        checked = self._cache.get(certificate)
        if checked is None:
            checked = self._check_certificate(certificate)
            with self._lock:
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                self._cache[certificate] = checked
        if isinstance(checked, str):
            raise SignatureRefused(checked)
        if checked.serial in self._revoked:
            raise SignatureRefused(f"signer certificate {checked.serial:x} of"
                                   f" {checked.identity} is revoked")
        if not checked.not_before_ms <= at_ms <= checked.not_after_ms:
            raise SignatureRefused(f"signer certificate of {checked.identity} was not valid at"
                                   f" the record's time {at_ms}")
        try:
            checked.key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise SignatureRefused(f"bad signature (claimed signer {checked.identity})") from None
        return checked.identity


class IssuerSigners:
    """Signers of any identity, issued from a CA folder this process may sign from
    (``TIDEMARK_TLS_ISSUER``, the local stack's ``<state>/pki``): for the tools that write
    records on behalf of many peers (the load generator, the tests). One certificate per
    identity, issued on first use."""

    def __init__(self, folder: Path, days: int = 2) -> None:
        self.folder, self.days = folder, days
        self._signers: dict[Identity, RecordSigner] = {}
        self._lock = threading.Lock()

    def signer(self, identity: Identity) -> RecordSigner:
        """The signer of ``identity`` (issued once)."""
        with self._lock:
            got = self._signers.get(identity)
            if got is None:
                stem = (f"{identity.uri.replace(':', '_')}-records-{os.getpid()}-"
                        f"{secrets.token_hex(4)}")  # processes never share a key file
                files = issue(self.folder, identity, self.folder / "issued", days=self.days,
                              stem=stem)
                got = self._signers[identity] = RecordSigner.from_files(files)
            return got

    def peer(self, environment: str, peer_id: str) -> RecordSigner:
        """The signer of peer ``peer_id`` of ``environment``."""
        return self.signer(Identity("peer", peer_id, environment))

    def operator(self, name: str) -> RecordSigner:
        """The signer of operator ``name``."""
        return self.signer(Identity("operator", name))


def sealer_of(transport: Transport | None) -> Sealer | None:
    """How a process with ``transport`` signs the records it writes: with its own TLS key;
    None on an insecure transport (records are then written unsigned)."""
    if transport is None or transport.files is None:
        return None
    return RecordSigner.from_files(transport.files).sealer


def verifier_of(transport: Transport | None) -> SignatureVerifier | None:
    """The verifier of a process with ``transport``: its trusted CAs and CRL; None on an
    insecure transport (signatures are then not required)."""
    if transport is None or transport.files is None:
        return None
    return SignatureVerifier.from_files(transport.files.ca, transport.files.crl)


def issuer_signers(state_dir: str | Path | None = None) -> IssuerSigners | None:
    """Signers from the CA folder this process may sign from (``TIDEMARK_TLS_ISSUER``, else
    the local stack's ``<state>/pki``); None when there is none or in insecure mode."""
    if registry.env_value("insecure"):
        return None
    issuer = registry.env_value("tls_issuer")
    folder = Path(issuer) if issuer else local_pki_dir(state_dir)
    return IssuerSigners(folder) if (folder / "trust.pem").is_file() else None


def load_sealers(environment: str, state_dir: str | Path | None = None
                 ) -> Callable[[str], Sealer] | None:
    """``recipient -> sealer`` for the load generator's acks (signed as each recipient of
    ``environment``), from :func:`issuer_signers`; None when this process cannot sign."""
    signers = issuer_signers(state_dir)
    if signers is None:
        return None
    return lambda peer: signers.peer(environment, peer).sealer
