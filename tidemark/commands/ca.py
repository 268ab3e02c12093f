"""``tidemark ca``: the cluster's certificate authority (init, rotate, issue, revoke, show)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tidemark.gossip.pki import (
    DEFAULT_DAYS,
    Identity,
    init_ca,
    issue,
    revoke,
    revoked_serials,
    rotate_ca,
)
from tidemark.gossip.tls import local_pki_dir
from tidemark.log.exceptions import ConfigError
from tidemark.options import add_json_flag, emit, print_json

__all__ = ["register"]


def _folder(args: argparse.Namespace) -> Path:
    return Path(args.dir) if args.dir else local_pki_dir()


def newest_ca(folder: Path) -> dict[str, Any] | None:
    """The CA that signs from now on (the highest ``ca-N.crt`` of ``folder``): its
    generation, files, subject, serial (hex) and expiry; None when the folder has none."""
    from cryptography import x509
    generations = sorted(int(p.stem.split("-")[1]) for p in folder.glob("ca-*.crt")
                         if p.stem.split("-")[1].isdigit())
    if not generations:
        return None
    n = generations[-1]
    cert = x509.load_pem_x509_certificate((folder / f"ca-{n}.crt").read_bytes())
    return {"generation": n, "cert": str(folder / f"ca-{n}.crt"),
            "key": str(folder / f"ca-{n}.key"), "subject": cert.subject.rfc4514_string(),
            "serial": f"{cert.serial_number:x}",
            "not_after": cert.not_valid_after_utc.isoformat()}


def ca_doc(folder: Path, created: bool) -> dict[str, Any]:
    """``ca init --json`` and ``ca rotate --json``: the folder, whether a CA was created,
    the CA that signs now (:func:`newest_ca`), the trust bundle and the files written
    (none when an existing CA was kept)."""
    ca = newest_ca(folder)
    written = [ca["cert"], ca["key"], str(folder / "trust.pem"), str(folder / "crl.pem")] \
        if created and ca else []
    return {"folder": str(folder), "created": created, "ca": ca,
            "trust": str(folder / "trust.pem"), "written": written}


def _init(args: argparse.Namespace) -> int:
    folder = _folder(args)
    if args.exist_ok and (folder / "trust.pem").is_file():
        emit(args, ca_doc(folder, created=False), f"a CA is already in {folder}; kept")
        return 0
    trust = init_ca(folder, days=args.days)
    emit(args, ca_doc(folder, created=True),
         f"CA created; trust bundle {trust} (hand it to every node and peer)")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    folder = _folder(args)
    trust = rotate_ca(folder, days=args.days)
    emit(args, ca_doc(folder, created=True),
         f"new CA signs from now on; {trust} trusts the old one too until it expires:"
         " distribute it, then re-issue every certificate")
    return 0


def _issue(args: argparse.Namespace) -> int:
    if args.kind == "peer" and not args.environment:
        raise ConfigError("a peer certificate needs --environment")
    identity = Identity(args.kind, args.name, args.environment if args.kind == "peer" else "")
    out = Path(args.out) if args.out else Path.cwd()
    files = issue(_folder(args), identity, out, days=args.days)
    doc = {"identity": identity.uri, "ca": str(files.ca), "cert": str(files.cert),
           "key": str(files.key), "crl": str(files.crl)}
    if args.json:
        print_json(doc)
    else:
        print(f"issued {identity.uri} for {args.days} days:")
        print(f"  TIDEMARK_TLS_CA={files.ca}\n  TIDEMARK_TLS_CERT={files.cert}\n"
              f"  TIDEMARK_TLS_KEY={files.key}\n  TIDEMARK_TLS_CRL={files.crl}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    try:
        serial = int(args.serial, 16)
    except ValueError:
        raise ConfigError(f"bad serial {args.serial!r}: hexadecimal, as `openssl x509"
                          " -serial` prints it") from None
    folder = _folder(args)
    serials = revoke(folder, serial)
    emit(args, revoke_doc(folder, serial, serials),
         f"revoked {serial:x}; {len(serials)} serial(s) on the list. Servers refuse it from"
         " their next call (they read crl.pem when it changes).")
    return 0


def revoke_doc(folder: Path, serial: int, serials: set[int]) -> dict[str, Any]:
    """``ca revoke --json``: the serial revoked, every serial on the list (hex, as
    ``openssl x509 -serial`` prints them) and the revocation list written."""
    return {"folder": str(folder), "revoked": f"{serial:x}",
            "serials": sorted(f"{s:x}" for s in serials), "crl": str(folder / "crl.pem")}


def _show(args: argparse.Namespace) -> int:
    folder = _folder(args)
    doc = {"folder": str(folder), "cas": sorted(p.name for p in folder.glob("ca-*.crt")),
           "revoked": sorted(f"{s:x}" for s in revoked_serials(folder))}
    print_json(doc)  # JSON with or without --json
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``ca``."""
    ca = commands.add_parser("ca", help="the certificate authority of the cluster's mutual TLS")
    sub = ca.add_subparsers(dest="ca_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser, days: int, json_help: str) -> None:
        p.add_argument("--dir", metavar="FOLDER", default=None,
                       help="the CA folder (default: the local stack's, <state>/pki)")
        p.add_argument("--days", type=int, default=days, help="validity in days")
        add_json_flag(p, help=json_help)

    made = "print the CA (generation, subject, serial) and the files written as JSON"

    init = sub.add_parser("init", help="create the CA (refuses if one exists)")
    common(init, 3650, made)
    init.add_argument("--exist-ok", action="store_true",
                      help="keep the CA already in the folder instead of refusing")
    init.set_defaults(func=_init)
    rotate = sub.add_parser("rotate", help="a new CA signs; the old stays trusted until expiry")
    common(rotate, 3650, made)
    rotate.set_defaults(func=_rotate)
    iss = sub.add_parser("issue", help="issue a node, peer or operator certificate")
    common(iss, DEFAULT_DAYS, "print the paths as JSON")
    iss.add_argument("kind", choices=("node", "peer", "operator"), help="who it is for")
    iss.add_argument("name", metavar="NAME", help="node id, peer id or operator name")
    iss.add_argument("--environment", default="", help="the peer's environment (peers only)")
    iss.add_argument("--out", metavar="FOLDER", default=None,
                     help="where to write <kind>-<name>.crt/.key and trust.pem (default: .)")
    iss.set_defaults(func=_issue)
    rev = sub.add_parser("revoke", help="revoke a certificate by its serial (hex)")
    common(rev, 7, "print the serial revoked and the revocation list as JSON")
    rev.add_argument("serial", metavar="SERIAL", help="hexadecimal serial")
    rev.set_defaults(func=_revoke)
    show = sub.add_parser("show", help="the CA generations and revoked serials (JSON)")
    common(show, 0, "accepted for scripts: the CA is printed as JSON either way")
    show.set_defaults(func=_show)
