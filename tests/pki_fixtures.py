"""A small PKI for the signing tests, made once per process: two trusted CAs (a rotation), an
untrusted one, and signers of peers and operators, one of them revoked."""

from __future__ import annotations

import datetime as dt
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tidemark.gossip.pki import Identity, init_ca, issue, revoke, rotate_ca
from tidemark.gossip.record_signing import RecordSigner, SignatureVerifier
from tidemark.log.wire import default_codec

ENVS = ("prod", "staging")
PEERS = ("billing", "shipping")


@dataclass(frozen=True)
class Pki:
    folder: Path
    signers: dict[str, RecordSigner]   # by label
    revoked_label: str

    def verifier(self) -> SignatureVerifier:
        return SignatureVerifier.from_files(self.folder / "trust.pem", self.folder / "crl.pem")


def _signer(files_cert: Path, files_key: Path) -> RecordSigner:
    cert = x509.load_pem_x509_certificate(files_cert.read_bytes())
    key = serialization.load_pem_private_key(files_key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return RecordSigner(cert, key)


def _self_signed_peer(env: str, name: str, issuer: x509.Name) -> RecordSigner:
    """A peer certificate naming the real CA as its issuer, signed by another key."""
    key = ec.generate_private_key(ec.SECP256R1())
    ident = Identity("peer", name, env)
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, ident.uri)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.UniformResourceIdentifier(ident.uri)]), critical=False)
            .sign(key, hashes.SHA256()))
    return RecordSigner(cert, key)


@cache
def pki() -> Pki:
    """Labels: ``peer:<env>:<name>`` (issued by CA 1), ``peer2:<env>:<name>`` (by CA 2,
    after the rotation), ``operator:alice``, ``revoked:prod:billing``,
    ``untrusted:prod:billing`` (another CA)."""
    folder = Path(tempfile.mkdtemp(prefix="tidemark-sign-tests-")) / "ca"
    init_ca(folder, name="tidemark tests")
    out = folder / "issued"
    signers: dict[str, RecordSigner] = {}
    for env in ENVS:
        for name in PEERS:
            f = issue(folder, Identity("peer", name, env), out, stem=f"p1-{env}-{name}")
            signers[f"peer:{env}:{name}"] = _signer(f.cert, f.key)
    f = issue(folder, Identity("operator", "alice"), out, stem="op-alice")
    signers["operator:alice"] = _signer(f.cert, f.key)
    f = issue(folder, Identity("peer", "billing", "prod"), out, stem="revoked")
    signers["revoked:prod:billing"] = rev = _signer(f.cert, f.key)
    revoke(folder, x509.load_der_x509_certificate(rev.certificate).serial_number)
    rotate_ca(folder, name="tidemark tests")
    for env in ENVS:
        for name in PEERS:
            f = issue(folder, Identity("peer", name, env), out, stem=f"p2-{env}-{name}")
            signers[f"peer2:{env}:{name}"] = _signer(f.cert, f.key)
    ca1 = x509.load_pem_x509_certificate((folder / "ca-1.crt").read_bytes())
    signers["untrusted:prod:billing"] = _self_signed_peer("prod", "billing", ca1.subject)
    return Pki(folder, signers, "revoked:prod:billing")


def encode(name: str, peer: str, env: str, ts: int, ids: tuple[str, ...] = ("m-1",)) -> bytes:
    """An unsigned txlog record of type ``name`` (empty signer and signature)."""
    codec = default_codec()
    if name == "Send":
        return codec.encode("Send", {
            "message_id": ids[0], "sender": "shop", "recipient": peer, "environment": env,
            "message_type": "t", "payload": b"p", "timestamp_ms": ts, "delivery_count": 0})
    if name == "Ack":
        return codec.encode("Ack", {"message_id": ids[0], "peer": peer, "environment": env,
                                    "timestamp_ms": ts})
    base = {"peer": peer, "environment": env, "timestamp_ms": ts, "signer": b"",
            "signature": b""}
    if name == "AckBatch":
        return codec.encode("AckBatch", {**base, "message_ids": list(ids)})
    if name == "Purge":
        return codec.encode("Purge", base)
    return codec.encode("DeliveryFailed", {**base, "message_id": ids[0], "sender": "shop",
                                           "message_type": "t", "reason": "boom"})
