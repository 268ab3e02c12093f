"""Peers on the real stack: two peers exchange 10k persistent messages exactly once and in
order, with acks in txlog; publish; environments; duplicate ids; bad input; asyncio."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import wait_for
from tidemark.gossip.pki import Identity
from tidemark.gossip.tls import resolve_transport
from tidemark.log.consumer import read_to_end
from tidemark.log.settings import Settings
from tidemark.peer_client import MessageContext, PeerOptions, message, message_type_of
from tidemark.peer_client.aio import AsyncPeer
from tidemark.peer_client.direct import DirectClient
from tidemark.peer_client.exceptions import (
    DuplicatePeerError,
    OversizedMessageError,
    PeerUnreachableError,
    WrongEnvironmentError,
)
from tidemark.peer_client.peer import Peer
from tidemark.peer_client.records import peer_codec

pytestmark = pytest.mark.integration

OPTS = PeerOptions(heartbeat_ms=500, dead_after_ms=3000, flight_size=20_000)


@message("itest.Order")
@dataclass
class Order:
    n: int
    note: str = ""


@message("itest.PriceChanged")
@dataclass
class PriceChanged:
    sku: str


@message("itest.Other")
@dataclass
class Other:
    x: int


@message("itest.Blob")
@dataclass
class Blob:
    data: bytes


def _txlog(settings: Settings) -> list[tuple[str, str, dict[str, Any]]]:
    codec = peer_codec()
    out = []
    for msgs in read_to_end(settings, "txlog", timeout_s=60):
        for m in msgs:
            dec = codec.decode(m.value())
            out.append((m.key().decode(), dec.name, dec.record))
    return out


def test_10k_persistent_messages_exactly_once_in_order_with_acks(fresh_settings: Settings
                                                                  ) -> None:
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()
    with Peer("B", "test", fresh_settings, OPTS) as b, Peer("A", "test", fresh_settings, OPTS) as a:
        @b.handler
        def on(msg: Order, ctx: MessageContext) -> None:
            assert not ctx.replay and ctx.sender == "A"
            with lock:
                seen.append((ctx.message_id, msg.n))

        a.wait_for_peer("B", condition=lambda e: "itest.Order" in e.subscriptions)
        handles = [a.send_nowait("B", Order(i), "log") for i in range(10_000)]
        assert a.flush(120)
        assert all(h.exception() is None for h in handles)
        wait_for(lambda: len(seen) >= 10_000, 120, 0.05, "B handling 10k messages")
        incarnation = b.incarnation
    assert [n for _, n in seen] == list(range(10_000))
    assert len({mid for mid, _ in seen}) == 10_000
    records = _txlog(fresh_settings)
    sends = [r for k, name, r in records if name == "Send" and k == "B"]
    acks = Counter(mid for k, name, r in records if name == "AckBatch" and k == "B"
                   for mid in r["message_ids"])
    assert len(sends) == 10_000 and {s["message_id"] for s in sends} == {m for m, _ in seen}
    assert all(s["direct_incarnation"] == incarnation for s in sends)
    assert set(acks) == {m for m, _ in seen} and set(acks.values()) == {1}
    descriptors = [r for _, name, r in records if name == "PeerDescriptor"]
    assert not descriptors  # the directory is its own topic


def test_publish_reaches_exactly_the_subscribers(fresh_settings: Settings) -> None:
    got: dict[str, list[str]] = {"B": [], "C": [], "D": []}
    peers = [Peer(p, "test", fresh_settings, OPTS) for p in "BCD"]
    for p in peers[:2]:
        p.handler(PriceChanged)(lambda msg, ctx, _p=p.peer_id: got[_p].append(msg.sku))
    peers[2].handler(Other)(lambda msg, ctx: got["D"].append("other"))
    for p in peers:
        p.start()
    try:
        with Peer("A", "test", fresh_settings, OPTS) as a:
            for p in "BC":
                a.wait_for_peer(p, condition=lambda e: "itest.PriceChanged" in e.subscriptions)
            a.wait_for_peer("D", condition=lambda e: "itest.Other" in e.subscriptions)
            assert a.subscribers(PriceChanged) == ["B", "C"]
            a.publish(PriceChanged("sku-1"))
            wait_for(lambda: got["B"] and got["C"], 30, 0.05, "subscribers handling it")
    finally:
        for p in peers:
            p.stop()
    assert got == {"B": ["sku-1"], "C": ["sku-1"], "D": []}
    sends = [r for _, name, r in _txlog(fresh_settings) if name == "Send"]
    assert sorted(s["recipient"] for s in sends) == ["B", "C"]


def test_persistent_send_to_a_down_peer_is_logged_not_raised(fresh_settings: Settings) -> None:
    b = Peer("B", "test", fresh_settings, OPTS).start()
    b.stop()
    with Peer("A", "test", fresh_settings, OPTS) as a:
        a.wait_for_peer("A")
        ids = [a.send("B", Order(i)) for i in range(20)]
        assert a.send("nobody-yet", Order(99))  # not registered: logged for later
    sends = [r for k, name, r in _txlog(fresh_settings) if name == "Send" and k == "B"]
    assert [s["message_id"] for s in sends] == ids
    assert all(s["direct_incarnation"] is None for s in sends)


def test_environments_are_refused_everywhere(fresh_settings: Settings) -> None:
    with pytest.raises(WrongEnvironmentError, match="settings say 'test'"):
        Peer("P", "prod", fresh_settings.with_overrides(environment="test"), OPTS)
    with Peer("P", "prod", fresh_settings, OPTS) as p, Peer("A", "test", fresh_settings, OPTS) as a:
        wait_for(lambda: a._core.directory.foreign_environment("P") == "prod", 30, 0.05,
                 "A seeing P's registration")
        wait_for(lambda: p._core.directory.foreign_environment("A") == "test", 30, 0.05,
                 "P seeing A's registration")
        with pytest.raises(WrongEnvironmentError, match="peer P is in environment 'prod'"):
            a.send("P", Order(1))
        with pytest.raises(WrongEnvironmentError, match="peer A is in environment 'test'"):
            p.send("A", Order(1))
        batch = peer_codec().encode("DirectBatch", {
            "sender": "P", "sender_incarnation": p.incarnation, "recipient": "A",
            "environment": "prod", "messages": [
                {"message_id": "x-1", "message_type": "itest.Order", "payload": b"",
                 "timestamp_ms": 1, "persistent": True}]})
        # over mutual TLS the refusal comes before the batch is read: P's certificate names
        # environment prod, an operator's names none
        p_cert = resolve_transport(Identity("peer", "P", "prod"))
        for client in (DirectClient(5000, p_cert), DirectClient(5000)):
            with pytest.raises(PeerUnreachableError, match="PERMISSION_DENIED"):
                client.call(a.endpoint, batch)
            client.close()
        assert a.stats.get("received", 0) == 0


def test_same_peer_id_twice_is_refused_and_a_crashed_one_is_taken_over(
        fresh_settings: Settings) -> None:
    first = Peer("B", "test", fresh_settings, OPTS).start()
    with pytest.raises(DuplicatePeerError, match="peer B is already running"):
        Peer("B", "test", fresh_settings, OPTS).start()
    first._close()  # a crash: no "down" record, the heartbeat is still fresh
    second = Peer("B", "test", fresh_settings, OPTS).start()
    try:
        assert second.incarnation != first.incarnation
    finally:
        second.stop()


def test_bad_input_is_reported_and_never_fatal(fresh_settings: Settings) -> None:
    seen: list[int] = []
    small = fresh_settings.with_overrides(max_message_bytes=10_000)
    with Peer("B", "test", small, OPTS) as b, Peer("A", "test", small, OPTS) as a:
        b.handler(Order)(lambda msg, ctx: seen.append(msg.n))
        a.wait_for_peer("B", condition=lambda e: "itest.Order" in e.subscriptions)
        # A's own ids, numbered by A's own counter: a number above A's next one would make
        # A's real next batch look late (a stale batch is refused and goes by the log)
        seq = a._core.sender._seq
        bad1, bad2 = f"{a.incarnation}-{next(seq)}", f"{a.incarnation}-{next(seq)}"
        batch = peer_codec().encode("DirectBatch", {
            "sender": "A", "sender_incarnation": a.incarnation, "recipient": "B",
            "environment": "test", "sender_nonce": a._core.nonce, "messages": [
                {"message_id": bad1, "message_type": "itest.Order", "payload": b"\xc3\x01zz",
                 "timestamp_ms": 1, "persistent": True},
                {"message_id": bad2, "message_type": "nobody.Declared", "payload": b"",
                 "timestamp_ms": 1, "persistent": True}]})
        client = DirectClient(5000, a._wiring.transport)  # as A, over A's certificate
        assert client.call(b.endpoint, batch)["accepted"] == 2
        client.close()
        with pytest.raises(OversizedMessageError, match="max_message_bytes=10000"):
            a.send("B", Blob(b"x" * 20_000))
        a.send("B", Order(7))
        wait_for(lambda: seen == [7], 30, 0.05, "the good message after the bad ones")
        assert b.stats["malformed"] == 1 and b.stats["unknown_type"] == 1
    failed = {r["message_id"]: r["reason"] for _, n, r in _txlog(small) if n == "DeliveryFailed"}
    assert set(failed) == {bad1, bad2} and "malformed" in failed[bad1]
    assert "nobody.Declared" in failed[bad2]
    assert not [r for _, n, r in _txlog(small) if n == "Send" and
                r["message_type"] == message_type_of(Blob).name]


def test_async_peers(fresh_settings: Settings) -> None:
    async def main() -> list[int]:
        seen: list[int] = []
        async with AsyncPeer("B", "test", fresh_settings, OPTS) as b, \
                AsyncPeer("A", "test", fresh_settings, OPTS) as a:
            @b.handler
            async def on(msg: Order, ctx: MessageContext) -> None:
                await asyncio.sleep(0)
                seen.append(msg.n)

            await asyncio.get_running_loop().run_in_executor(
                None, lambda: a.sync.wait_for_peer(
                    "B", condition=lambda e: "itest.Order" in e.subscriptions))
            for i in range(200):
                await a.send("B", Order(i)) if i % 50 == 0 else await a.send_nowait("B", Order(i))
            assert await a.flush(60)
            deadline = asyncio.get_running_loop().time() + 60
            while len(seen) < 200 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
        return seen
    assert asyncio.run(main()) == list(range(200))
