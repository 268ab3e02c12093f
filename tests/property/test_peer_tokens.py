"""Peer tokens (gossip.peer_auth), property-tested: a token is accepted exactly for the
environment and peer it names, under the secret that issued it, before it expires; any
change to any character of it, or any other secret, is refused as unauthenticated."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tidemark.gossip.exceptions import PeerAuthError, PeerForbiddenError
from tidemark.gossip.peer_auth import authorize_peer, issue_token, parse_token, verify_token

names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=24)
secrets_ = st.binary(min_size=1, max_size=48)
NOW = 1_700_000_000_000


@given(secrets_, names, names, st.one_of(st.none(), st.integers(1, 10**9)))
def test_issued_tokens_are_accepted_for_what_they_name(secret: bytes, env: str, peer: str,
                                                       ttl: int | None) -> None:
    token = issue_token(secret, env, peer, ttl, now_ms=NOW)
    claims = authorize_peer(secret, token, env, peer, now_ms=NOW)
    assert (claims.environment, claims.peer, claims.issued_ms) == (env, peer, NOW)
    assert claims.expires_ms == (NOW + ttl if ttl else 0)
    assert authorize_peer(secret, token, env, None, now_ms=NOW) == claims


@given(secrets_, names, names, names, names)
def test_other_environment_or_peer_is_forbidden(secret: bytes, env: str, peer: str,
                                                other_env: str, other_peer: str) -> None:
    token = issue_token(secret, env, peer, now_ms=NOW)
    if other_env != env:
        with pytest.raises(PeerForbiddenError, match="environment"):
            authorize_peer(secret, token, other_env, peer, now_ms=NOW)
    if other_peer != peer:
        with pytest.raises(PeerForbiddenError, match="may not act on the queue"):
            authorize_peer(secret, token, env, other_peer, now_ms=NOW)


@given(secrets_, secrets_, names, names)
def test_another_secret_is_unauthenticated(secret: bytes, forger: bytes, env: str,
                                           peer: str) -> None:
    assume(secret != forger)
    forged = issue_token(forger, env, peer, now_ms=NOW)
    with pytest.raises(PeerAuthError) as err:
        authorize_peer(secret, forged, env, peer, now_ms=NOW)
    assert type(err.value) is PeerAuthError and "bad signature" in str(err.value)


@settings(max_examples=300)
@given(secrets_, names, names, st.data())
def test_any_tampering_is_unauthenticated(secret: bytes, env: str, peer: str,
                                          data: st.DataObject) -> None:
    token = issue_token(secret, env, peer, now_ms=NOW)
    i = data.draw(st.integers(0, len(token) - 1))
    c = data.draw(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                  "0123456789-_."))
    tampered = token[:i] + c + token[i + 1:]
    assume(tampered != token)
    try:
        claims = verify_token(secret, tampered, now_ms=NOW)
    except PeerAuthError as exc:
        assert type(exc) is PeerAuthError  # never "forbidden": not authenticated at all
        return
    # base64 padding bits: a different text that decodes to the very same bytes
    assert claims == verify_token(secret, token, now_ms=NOW)
    assert parse_token(tampered)[0] == parse_token(token)[0]


@given(secrets_, names, names, st.integers(1, 10**9), st.integers(0, 10**9))
def test_expiry(secret: bytes, env: str, peer: str, ttl: int, later: int) -> None:
    token = issue_token(secret, env, peer, ttl, now_ms=NOW)
    if later < ttl:
        assert verify_token(secret, token, now_ms=NOW + later).peer == peer
    else:
        with pytest.raises(PeerAuthError, match="expired"):
            verify_token(secret, token, now_ms=NOW + later)
