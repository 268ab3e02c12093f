"""Incarnations bound to their peer (peer_client.incarnation), against the rule they state: a
batch's ids are accepted only under the incarnation its sender's nonce gives that sender."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemark.peer_client.incarnation import ids_owned, incarnation_of, new_incarnation

names = st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=20)


@given(names, names, st.lists(st.integers(0, 10**9), max_size=20))
def test_a_sender_owns_the_ids_of_its_incarnation(env: str, peer: str, ns: list[int]) -> None:
    inc, nonce = new_incarnation(env, peer)
    assert ids_owned(env, peer, inc, nonce, [f"{inc}-{n}" for n in ns])


@given(names, names, names, st.integers(0, 10**9))
def test_another_sender_cannot_claim_them(env: str, peer: str, other: str, n: int) -> None:
    inc, nonce = new_incarnation(env, peer)
    if other != peer:  # the other peer, even knowing the nonce, gets another incarnation
        assert not ids_owned(env, other, inc, nonce, [f"{inc}-{n}"])
        other_inc = incarnation_of(env, other, nonce)
        assert not ids_owned(env, other, other_inc, nonce, [f"{inc}-{n}"])
    assert not ids_owned(env + "x", peer, inc, nonce, [f"{inc}-{n}"])
    assert not ids_owned(env, peer, inc, "", [f"{inc}-{n}"])  # an old sender: no nonce
    assert not ids_owned(env, peer, inc, nonce, [f"{inc}-{n}", f"x{inc}-{n}"])
