"""``tidemark ca``: the cluster's certificate authority (init, rotate, issue, revoke, show)."""

from __future__ import annotations

import argparse
from pathlib import Path

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
from tidemark.options import print_json

__all__ = ["register"]


def _folder(args: argparse.Namespace) -> Path:
    return Path(args.dir) if args.dir else local_pki_dir()


def _init(args: argparse.Namespace) -> int:
    folder = _folder(args)
    if args.exist_ok and (folder / "trust.pem").is_file():
        print(f"a CA is already in {folder}; kept")
        return 0
    trust = init_ca(folder, days=args.days)
    print(f"CA created; trust bundle {trust} (hand it to every node and peer)")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    trust = rotate_ca(_folder(args), days=args.days)
    print(f"new CA signs from now on; {trust} trusts the old one too until it expires:"
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
    serials = revoke(_folder(args), serial)
    print(f"revoked {serial:x}; {len(serials)} serial(s) on the list. Servers refuse it from"
          " their next call (they read crl.pem when it changes).")
    return 0


def _show(args: argparse.Namespace) -> int:
    folder = _folder(args)
    doc = {"folder": str(folder), "cas": sorted(p.name for p in folder.glob("ca-*.crt")),
           "revoked": sorted(f"{s:x}" for s in revoked_serials(folder))}
    print_json(doc)
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``ca``."""
    ca = commands.add_parser("ca", help="the certificate authority of the cluster's mutual TLS")
    sub = ca.add_subparsers(dest="ca_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser, days: int) -> None:
        p.add_argument("--dir", metavar="FOLDER", default=None,
                       help="the CA folder (default: the local stack's, <state>/pki)")
        p.add_argument("--days", type=int, default=days, help="validity in days")

    init = sub.add_parser("init", help="create the CA (refuses if one exists)")
    common(init, 3650)
    init.add_argument("--exist-ok", action="store_true",
                      help="keep the CA already in the folder instead of refusing")
    init.set_defaults(func=_init)
    rotate = sub.add_parser("rotate", help="a new CA signs; the old stays trusted until expiry")
    common(rotate, 3650)
    rotate.set_defaults(func=_rotate)
    iss = sub.add_parser("issue", help="issue a node, peer or operator certificate")
    common(iss, DEFAULT_DAYS)
    iss.add_argument("kind", choices=("node", "peer", "operator"), help="who it is for")
    iss.add_argument("name", metavar="NAME", help="node id, peer id or operator name")
    iss.add_argument("--environment", default="", help="the peer's environment (peers only)")
    iss.add_argument("--out", metavar="FOLDER", default=None,
                     help="where to write <kind>-<name>.crt/.key and trust.pem (default: .)")
    iss.add_argument("--json", action="store_true", help="print the paths as JSON")
    iss.set_defaults(func=_issue)
    rev = sub.add_parser("revoke", help="revoke a certificate by its serial (hex)")
    common(rev, 7)
    rev.add_argument("serial", metavar="SERIAL", help="hexadecimal serial")
    rev.set_defaults(func=_revoke)
    show = sub.add_parser("show", help="the CA generations and revoked serials (JSON)")
    common(show, 0)
    show.set_defaults(func=_show)
