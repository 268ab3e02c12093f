"""Forged direct deliveries against real peers (real Kafka, real gRPC over mutual TLS).

Mallory holds a valid peer certificate of the same environment. She delivers straight to
Rita's port a batch claiming to come from Alice with Alice's next message id, then one in her
own name reusing Alice's id, then one with a made-up incarnation. Each is refused with a
receipt (a real sender would log the messages instead, so nothing is lost), none reaches
Rita's handler, and afterwards every message Alice really sends, with exactly those ids, is
handled once. A peer of another environment cannot even read Rita's status."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from tests.support import wait_for
from tidemark.gossip.pki import Identity
from tidemark.gossip.tls import resolve_transport
from tidemark.log.settings import Settings
from tidemark.peer_client import MessageContext, PeerOptions, message
from tidemark.peer_client.direct import DirectClient, peer_status
from tidemark.peer_client.exceptions import PeerUnreachableError
from tidemark.peer_client.incarnation import new_incarnation
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.records import peer_codec

pytestmark = pytest.mark.integration
OPTS = PeerOptions(heartbeat_ms=500, dead_after_ms=3000)


@message("sectest.Transfer")
@dataclass
class Transfer:
    n: int


def _batch(sender: str, incarnation: str, nonce: str, ids: list[str]) -> bytes:
    return peer_codec().encode("DirectBatch", {
        "sender": sender, "sender_incarnation": incarnation, "recipient": "rita",
        "environment": "test", "sender_nonce": nonce, "messages": [
            {"message_id": i, "message_type": "sectest.Transfer",
             "payload": b"\x00",
             "timestamp_ms": 1, "persistent": True} for i in ids]})


def test_forged_deliveries_are_refused_and_nothing_real_is_lost(
        fresh_settings: Settings) -> None:
    seen: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    def on(msg: Transfer, ctx: MessageContext) -> None:
        with lock:
            seen.append((ctx.sender, ctx.message_id, msg.n))
    with Peer("rita", "test", fresh_settings, OPTS) as rita, \
            Peer("alice", "test", fresh_settings, OPTS) as alice:
        rita.handler(Transfer)(on)
        alice.wait_for_peer("rita", condition=lambda e: "sectest.Transfer" in e.subscriptions)
        next_ids = [f"{alice.incarnation}-{n}" for n in range(1, 6)]  # Alice's next ids
        mallory = DirectClient(5000, resolve_transport(Identity("peer", "mallory", "test")))
        mine, my_nonce = new_incarnation("test", "mallory")
        forgeries = {
            "claims alice": _batch("alice", alice.incarnation, "", next_ids),
            "alice's ids as mallory": _batch("mallory", alice.incarnation, my_nonce, next_ids),
            "alice's ids, mallory's nonce": _batch("mallory", mine, my_nonce,
                                                   [f"{mine}-1", *next_ids]),
            "made-up incarnation": _batch("mallory", "0123456789abcdef", "x", ["0123-1"]),
        }
        for what, batch in forgeries.items():
            receipt = mallory.call(rita.endpoint, batch)
            assert receipt["error_kind"] == "forbidden" and receipt["accepted"] == 0, what
        mallory.close()
        assert rita.stats["forbidden"] == len(forgeries)
        for n in range(1, 6):
            alice.send("rita", Transfer(n))
        wait_for(lambda: len(seen) >= 5, 30, 0.05, "alice's five transfers")
        assert sorted(seen) == [("alice", i, n) for n, i in enumerate(next_ids, 1)]
        assert rita.stats.get("received", 0) == 5

        other_env = resolve_transport(Identity("peer", "eve", "prod"))
        with pytest.raises(PeerUnreachableError, match="PERMISSION_DENIED") as err:
            peer_status(rita.endpoint, "test", transport=other_env)
        assert "test" not in str(err.value).replace("PERMISSION_DENIED", "")  # says nothing
        assert peer_status(rita.endpoint, "test")["peer_id"] == "rita"  # an operator may ask
