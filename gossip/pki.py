"""The cluster's certificate authority: identities in X.509 certificates, issued and revoked.

Every gRPC channel of Tidemark is mutual TLS; what a caller *is* comes from its certificate,
never from a request body. An identity is a URI subject alternative name:

- ``tidemark:node:<node_id>`` — a replica node;
- ``tidemark:peer:<environment>:<peer_id>`` — a peer of one environment;
- ``tidemark:operator:<name>`` — the CLI of an operator (status, pins, config).

Each certificate also carries a DNS name derived from its identity (:meth:`Identity.dns_name`)
and one shared by its kind (:func:`kind_dns_name`): a client sets the first as the TLS target
name when it calls a given node or peer, the second when any node will do, so the handshake
itself proves the server is whom the client meant to reach.

A CA folder holds ``ca-<n>.key`` / ``ca-<n>.crt`` (the newest signs), ``trust.pem`` (every CA
still trusted, newest first: rotation keeps the old one until its certificates expire),
``serial`` and ``crl.pem`` (revoked serials, signed by the newest CA). Keys are written 0600
in a 0700 folder. Only the ``cryptography`` package does cryptography here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tidemark.gossip.exceptions import GossipError

__all__ = ["Identity", "PkiError", "TlsFiles", "init_ca", "rotate_ca", "issue", "revoke",
           "revoked_serials", "identity_of_pem", "write_private", "kind_dns_name"]

_SCHEME = "tidemark"
_KINDS = ("node", "peer", "operator")
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
DEFAULT_CA_DAYS = 3650
DEFAULT_DAYS = 30


class PkiError(GossipError):
    """A CA folder, certificate or identity is missing or wrong."""


@dataclass(frozen=True)
class Identity:
    """Who a certificate speaks for."""

    kind: str
    name: str
    environment: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise PkiError(f"unknown identity kind {self.kind!r} (one of {', '.join(_KINDS)})")
        if not _NAME.fullmatch(self.name):
            raise PkiError(f"bad {self.kind} name {self.name!r}: letters, digits, _ . - only")
        if (self.kind == "peer") != bool(self.environment):
            raise PkiError("a peer identity names its environment; nodes and operators do not")
        if self.environment and not _NAME.fullmatch(self.environment):
            raise PkiError(f"bad environment {self.environment!r}")

    @property
    def uri(self) -> str:
        """The URI subject alternative name."""
        parts = [_SCHEME, self.kind] + ([self.environment] if self.environment else [])
        return ":".join([*parts, self.name])

    @property
    def dns_name(self) -> str:
        """The DNS name a client expects of the server with this identity."""
        digest = hashlib.sha256(self.uri.encode()).hexdigest()[:40]
        return f"{self.kind}-{digest}.tidemark.invalid"

    @classmethod
    def parse(cls, uri: str) -> Identity:
        """The identity of a URI SAN; raises :class:`PkiError`."""
        parts = uri.split(":")
        if len(parts) < 3 or parts[0] != _SCHEME:
            raise PkiError(f"not a Tidemark identity: {uri!r}")
        if parts[1] == "peer" and len(parts) == 4:
            return cls("peer", parts[3], parts[2])
        if len(parts) == 3:
            return cls(parts[1], parts[2])
        raise PkiError(f"not a Tidemark identity: {uri!r}")

    def __str__(self) -> str:
        return self.uri


@dataclass(frozen=True)
class TlsFiles:
    """Where one identity's TLS material lies: trust bundle, certificate, key, optional CRL."""

    ca: Path
    cert: Path
    key: Path
    crl: Path | None = None

    def missing(self) -> list[Path]:
        """The files that do not exist."""
        return [p for p in (self.ca, self.cert, self.key) if not p.is_file()]


def kind_dns_name(kind: str) -> str:
    """The DNS name every certificate of ``kind`` carries: a client that expects *some* node
    (not a given one) checks that name."""
    return f"{kind}.tidemark.invalid"


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by the owner only (0600; an existing file is tightened)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cas(folder: Path) -> list[int]:
    return sorted((int(p.stem.split("-")[1]) for p in folder.glob("ca-*.crt")), reverse=True)


def _load_ca(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    generations = _cas(folder)
    if not generations:
        raise PkiError(f"no CA in {folder}: run `tidemark ca init --dir {folder}`")
    n = generations[0]
    cert = x509.load_pem_x509_certificate((folder / f"ca-{n}.crt").read_bytes())
    key = serialization.load_pem_private_key((folder / f"ca-{n}.key").read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"{folder}/ca-{n}.key is not an EC key")
    return cert, key


def _new_ca(folder: Path, generation: int, name: str, days: int) -> x509.Certificate:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Tidemark"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA {generation}")])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    write_private(folder / f"ca-{generation}.key", _key_pem(key))
    (folder / f"ca-{generation}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


def _write_trust(folder: Path) -> None:
    now = _now()
    pems = []
    for n in _cas(folder):
        data = (folder / f"ca-{n}.crt").read_bytes()
        if x509.load_pem_x509_certificate(data).not_valid_after_utc > now:
            pems.append(data)
    (folder / "trust.pem").write_bytes(b"".join(pems))


def init_ca(folder: Path, name: str = "tidemark", days: int = DEFAULT_CA_DAYS) -> Path:
    """Create the CA in ``folder`` (0700); refuses if one is there. Returns the trust bundle."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    if _cas(folder):
        raise PkiError(f"{folder} already holds a CA (use `tidemark ca rotate` for a new one)")
    _new_ca(folder, 1, name, days)
    _write_trust(folder)
    _write_crl(folder, set())
    return folder / "trust.pem"


def rotate_ca(folder: Path, name: str = "tidemark", days: int = DEFAULT_CA_DAYS) -> Path:
    """A new CA signs from now on; the old ones stay trusted until they expire. Hand the new
    ``trust.pem`` to every node and peer first, then re-issue their certificates."""
    generations = _cas(folder)
    if not generations:
        raise PkiError(f"no CA in {folder}: run `tidemark ca init --dir {folder}`")
    _new_ca(folder, generations[0] + 1, name, days)
    _write_trust(folder)
    _write_crl(folder, revoked_serials(folder))
    return folder / "trust.pem"


def issue(folder: Path, identity: Identity, out: Path, days: int = DEFAULT_DAYS,
          stem: str | None = None) -> TlsFiles:
    """Issue ``identity`` a key and certificate signed by the newest CA of ``folder``, written
    to ``out`` as ``<stem>.key`` (0600), ``<stem>.crt`` and ``trust.pem``."""
    ca_cert, ca_key = _load_ca(folder)
    key = _key()
    now = _now()
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                        identity.uri[:64])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName([
                x509.UniformResourceIdentifier(identity.uri), x509.DNSName(identity.dns_name),
                x509.DNSName(kind_dns_name(identity.kind))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    stem = stem or f"{identity.kind}-{identity.name}"
    out.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(out / "trust.pem", out / f"{stem}.crt", out / f"{stem}.key",
                     folder / "crl.pem")
    write_private(files.key, _key_pem(key))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if files.ca.resolve() != (folder / "trust.pem").resolve():
        tmp = files.ca.with_name(f".{files.ca.name}.{os.getpid()}.tmp")
        tmp.write_bytes((folder / "trust.pem").read_bytes())
        tmp.replace(files.ca)  # atomic: another process may read it meanwhile
    return files


def revoked_serials(folder: Path) -> set[int]:
    """The serials revoked by the CA of ``folder`` (its ``crl.pem``)."""
    path = folder / "crl.pem" if folder.is_dir() else folder
    if not path.is_file():
        return set()
    crl = x509.load_pem_x509_crl(path.read_bytes())
    return {entry.serial_number for entry in crl}


def _write_crl(folder: Path, serials: set[int]) -> None:
    ca_cert, ca_key = _load_ca(folder)
    now = _now()
    builder = (x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject)
               .last_update(now).next_update(now + dt.timedelta(days=7)))
    for serial in sorted(serials):
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build())
    crl = builder.sign(ca_key, hashes.SHA256())
    (folder / "crl.pem").write_bytes(crl.public_bytes(serialization.Encoding.PEM))


def revoke(folder: Path, serial: int) -> set[int]:
    """Add ``serial`` to the CA's revocation list; servers refuse it from their next call."""
    serials = revoked_serials(folder) | {serial}
    _write_crl(folder, serials)
    return serials


def identity_of_pem(pem: bytes) -> tuple[Identity, int]:
    """The identity and serial of a PEM certificate; raises :class:`PkiError`."""
    cert = x509.load_pem_x509_certificate(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise PkiError("certificate has no subject alternative name") from None
    for uri in san.get_values_for_type(x509.UniformResourceIdentifier):
        if uri.startswith(_SCHEME + ":"):
            return Identity.parse(uri), cert.serial_number
    raise PkiError("certificate names no Tidemark identity")
