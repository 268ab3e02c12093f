"""A certificate authority per test module, and the identities tests call with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tidemark.gossip.pki import Identity, init_ca, issue
from tidemark.gossip.tls import Transport


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh CA folder."""
    folder = tmp_path_factory.mktemp("ca") / "pki"
    init_ca(folder)
    return folder


@pytest.fixture(scope="module")
def transport_of(ca_dir: Path) -> Callable[..., Transport]:
    """``transport_of("peer", "alice", "prod")``: a Transport holding a certificate of that
    identity, issued by the module's CA."""
    def make(kind: str, name: str, environment: str = "") -> Transport:
        identity = Identity(kind, name, environment)
        files = issue(ca_dir, identity, ca_dir.parent / "issued", stem=identity.uri.replace(":", "_"))
        return Transport(identity, files)
    return make
