"""Mutual TLS for every gRPC channel, and who is calling.

A :class:`Transport` is one process's side of the network: its own certificate and key, the CAs
it trusts (and their revocation list), or nothing at all in an explicitly insecure development
set-up. Servers listen with :meth:`Transport.listen`; clients open channels with
:meth:`Transport.channel`, naming the identity they expect to reach (the TLS handshake then
proves it, see :class:`~tidemark.gossip.pki.Identity`); handlers learn who called with
:meth:`Transport.caller`, from the TLS session only.

:func:`resolve_transport` finds the material, in order: explicit files; ``TIDEMARK_TLS_CA`` /
``_CERT`` / ``_KEY`` (and ``_CRL``); a CA folder this process may issue from
(``TIDEMARK_TLS_ISSUER``, else the local stack's ``<state>/pki``), which issues it a
short-lived certificate of its own identity; else, only with
``TIDEMARK_INSECURE=1`` (or ``insecure=True``), plaintext with a warning at every start.
Otherwise it raises :class:`TlsMissingError`: a process never starts open by accident.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tidemark.gossip.exceptions import GossipError
from tidemark.gossip.pki import (
    Identity,
    PkiError,
    TlsFiles,
    identity_of_pem,
    issue,
    kind_dns_name,
    revoked_serials,
)
from tidemark.log import registry
from tidemark.log.settings import default_state_dir

__all__ = ["Transport", "TlsMissingError", "resolve_transport", "local_pki_dir",
           "default_transport", "INSECURE_WARNING", "Trust", "resolve_trust",
           "CHANNEL_LIVENESS", "SERVER_LIVENESS"]

log = logging.getLogger("tidemark.tls")
INSECURE_WARNING = ("INSECURE: TLS is off (--insecure / TIDEMARK_INSECURE=1): anyone who reaches"
                    " this process's ports can read and forge its traffic")
#: Where the local stack keeps its CA, under its state folder.
_LOCAL_PKI = "pki"
_ISSUED_DAYS = 2
#: Every channel pings its server every 5 s and drops the connection when a ping goes
#: unanswered for 5 s (gRPC then also sets TCP_USER_TIMEOUT), and retries a lost server at
#: least every 2 s. Without this a connection across a healed partition waited for TCP's own
#: retransmission back-off (tens of seconds after a partition of a minute) and a lost server
#: for gRPC's (up to 120 s): docs/partitions.md, "Recovery after healing".
CHANNEL_LIVENESS: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", 5000), ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 500), ("grpc.max_reconnect_backoff_ms", 2000)]
#: What a server accepts of :data:`CHANNEL_LIVENESS`'s pings (else it answers them with
#: GOAWAY "too many pings").
SERVER_LIVENESS: list[tuple[str, Any]] = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 4000),
    ("grpc.http2.max_ping_strikes", 0)]


class TlsMissingError(GossipError):
    """No TLS material, and insecure mode not asked for."""


def local_pki_dir(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """The CA folder of the local stack (``<state>/pki``)."""
    return (Path(state_dir) if state_dir else default_state_dir()) / _LOCAL_PKI


@dataclass
class Transport:
    """One process's TLS material (``files`` None: insecure) and identity."""

    identity: Identity
    files: TlsFiles | None
    _cache: dict[bytes, tuple[Identity, int]] = field(default_factory=dict, repr=False)
    _revoked: tuple[float, frozenset[int]] = (-1.0, frozenset())
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def secure(self) -> bool:
        """True when channels are mutual TLS."""
        return self.files is not None

    def listen(self, server: grpc.Server, address: str) -> int:
        """Add ``address`` to ``server`` (TLS with client certificates required); the port,
        0 when it cannot listen there."""
        try:
            if self.files is None:
                return int(server.add_insecure_port(address))
            creds = grpc.ssl_server_credentials(
                [(self.files.key.read_bytes(), self.files.cert.read_bytes())],
                root_certificates=self.files.ca.read_bytes(), require_client_auth=True)
            return int(server.add_secure_port(address, creds))
        except RuntimeError:
            return 0

    def channel(self, address: str, expect: Identity | str,
                options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
        """A channel to ``address``; with TLS, the server must prove it is ``expect``: an
        identity, or any holder of a certificate of that kind (``"node"``, ``"peer"``)."""
        opts = [*CHANNEL_LIVENESS, *(options or [])]
        if self.files is None:
            return grpc.insecure_channel(address, options=opts)
        creds = grpc.ssl_channel_credentials(self.files.ca.read_bytes(),
                                             self.files.key.read_bytes(),
                                             self.files.cert.read_bytes())
        name = expect.dns_name if isinstance(expect, Identity) else kind_dns_name(expect)
        opts.append(("grpc.ssl_target_name_override", name))
        return grpc.secure_channel(address, creds, options=opts)

    def caller(self, context: grpc.ServicerContext) -> Identity | None:
        """The identity of the caller of the call ``context`` serves: from its certificate;
        None on an insecure transport. Raises :class:`PkiError` for a certificate that names
        no identity or is revoked."""
        if self.files is None:
            return None
        auth = context.auth_context()
        pems = auth.get("x509_pem_cert") or []
        if not pems:
            raise PkiError("no client certificate")
        pem = pems[0]
        got = self._cache.get(pem)
        if got is None:
            got = identity_of_pem(pem)
            with self._lock:
                if len(self._cache) > 4096:
                    self._cache.clear()
                self._cache[pem] = got
        identity, serial = got
        if serial in self._revoked_now():
            raise PkiError(f"certificate {serial:x} of {identity} is revoked")
        return identity

    def _revoked_now(self) -> frozenset[int]:
        crl = self.files.crl if self.files is not None else None
        if crl is None:
            return frozenset()
        try:
            mtime = crl.stat().st_mtime
        except OSError:
            return frozenset()
        if mtime != self._revoked[0]:
            self._revoked = (mtime, frozenset(revoked_serials(crl)))
        return self._revoked[1]


def _env_files() -> TlsFiles | None:
    ca, cert, key = (registry.env_value(n) for n in ("tls_ca", "tls_cert", "tls_key"))
    if not (ca or cert or key):
        return None
    if not (ca and cert and key):
        raise TlsMissingError("TIDEMARK_TLS_CA, TIDEMARK_TLS_CERT and TIDEMARK_TLS_KEY go"
                              " together: set all three")
    crl = registry.env_value("tls_crl")
    return TlsFiles(Path(ca), Path(cert), Path(key), Path(crl) if crl else None)


def _local_files(identity: Identity, state_dir: Path | None) -> TlsFiles | None:
    issuer = registry.env_value("tls_issuer")
    folder = Path(issuer) if issuer else local_pki_dir(state_dir)
    if not (folder / "trust.pem").is_file():
        return None
    stem = f"{identity.uri.replace(':', '_')}-{os.getpid()}-{secrets.token_hex(4)}"
    try:  # a certificate of this process's own: processes never share a key file
        return issue(folder, identity, folder / "issued", days=_ISSUED_DAYS, stem=stem)
    except (OSError, PkiError) as exc:
        raise TlsMissingError(f"cannot issue a certificate from the CA {folder}:"
                              f" {exc}") from None


def resolve_transport(identity: Identity, files: TlsFiles | None = None,
                      insecure: bool | None = None,
                      state_dir: Path | None = None) -> Transport:
    """This process's transport as ``identity`` (see the module doc for the order)."""
    if insecure is None:
        insecure = bool(registry.env_value("insecure"))
    if insecure:
        log.warning("%s (%s)", INSECURE_WARNING, identity)
        return Transport(identity, None)
    files = files or _env_files() or _local_files(identity, state_dir)
    if files is None:
        raise TlsMissingError(
            f"no TLS material for {identity}: set TIDEMARK_TLS_CA, TIDEMARK_TLS_CERT and"
            " TIDEMARK_TLS_KEY (`tidemark ca issue`), start the local stack (`tidemark local"
            " up`), or pass --insecure / TIDEMARK_INSECURE=1 for development only")
    missing = files.missing()
    if missing:
        raise TlsMissingError(f"TLS material of {identity} missing: "
                              + ", ".join(str(p) for p in missing))
    return Transport(identity, files)


@dataclass(frozen=True)
class Trust:
    """The CA material of a process that only verifies (the queues job checks who signed
    txlog records): the trust bundle and, optionally, the revocation list."""

    ca: Path
    crl: Path | None = None


def resolve_trust(insecure: bool | None = None, state_dir: Path | None = None,
                  files: TlsFiles | None = None) -> Trust | None:
    """The trust material found as :func:`resolve_transport` finds TLS material (explicit
    files; ``TIDEMARK_TLS_CA`` and ``TIDEMARK_TLS_CRL``; the CA folder of
    ``TIDEMARK_TLS_ISSUER`` or the local stack), None only in insecure mode; raises
    :class:`TlsMissingError` otherwise (fail closed)."""
    if insecure is None:
        insecure = bool(registry.env_value("insecure"))
    if insecure:
        log.warning("%s (txlog signatures are not checked)", INSECURE_WARNING)
        return None
    if files is not None:
        trust = Trust(files.ca, files.crl)
    elif registry.env_value("tls_ca"):
        crl = registry.env_value("tls_crl")
        trust = Trust(Path(registry.env_value("tls_ca")), Path(crl) if crl else None)
    else:
        issuer = registry.env_value("tls_issuer")
        folder = Path(issuer) if issuer else local_pki_dir(state_dir)
        if not (folder / "trust.pem").is_file():
            raise TlsMissingError(
                "no CA material to check txlog signatures with: set TIDEMARK_TLS_CA (and"
                " TIDEMARK_TLS_CRL), start the local stack (`tidemark local up`), or pass"
                " --insecure / TIDEMARK_INSECURE=1 for development only")
        trust = Trust(folder / "trust.pem", folder / "crl.pem")
    if not trust.ca.is_file():
        raise TlsMissingError(f"the CA bundle {trust.ca} is missing")
    return trust


_DEFAULT: dict[tuple[Any, ...], Transport] = {}
_DEFAULT_LOCK = threading.Lock()


def default_transport() -> Transport:
    """The transport of a client made without one (the command line, tools, tests): an
    operator named after the user, resolved as :func:`resolve_transport` does, once per
    configuration. Components that have an identity of their own (a node, a peer) pass
    theirs explicitly."""
    key = tuple(registry.env_value(n) for n in ("tls_ca", "tls_cert", "tls_key", "tls_issuer",
                                                 "insecure", "state_dir"))
    with _DEFAULT_LOCK:
        got = _DEFAULT.get(key)
        if got is None:
            name = re.sub(r"[^A-Za-z0-9_.\-]", "_", getpass.getuser() or "cli")[:60] or "cli"
            got = _DEFAULT[key] = resolve_transport(Identity("operator", name))
        return got
