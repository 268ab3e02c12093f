"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def insecure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plaintext gRPC for this test (``TIDEMARK_INSECURE=1``): for tests of what runs the same
    on either transport (replay streaming, backfill chunks, tokens on an insecure server).
    Mutual TLS itself is tested in tests/security."""
    monkeypatch.setenv("TIDEMARK_INSECURE", "1")
