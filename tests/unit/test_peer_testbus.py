"""The real ``Peer`` over the in-memory test double: send, publish, acks, failures, crashes,
duplicates, restarts, environments, flight size, bad input, and what ``with_real`` refuses."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from tidemark.log.settings import Settings
from tidemark.peer_client import MessageContext, PeerOptions, message
from tidemark.peer_client.exceptions import (
    DuplicatePeerError,
    FlightSizeExceededError,
    OversizedMessageError,
    PayloadError,
    PeerStateError,
    PeerUnreachableError,
    WrongEnvironmentError,
)
from tidemark.peer_client.testing import RealStackError, SimulatedCrash, TestBus


@message("tests.peer.OrderPlaced")
@dataclass
class OrderPlaced:
    order_id: str
    amount: int


@message("tests.peer.PriceChanged")
@dataclass
class PriceChanged:
    sku: str
    price: int


@message("tests.peer.Ping", transient=True)
@dataclass
class Ping:
    n: int


@message("tests.peer.Blob")
@dataclass
class Blob:
    data: bytes


def _collect(peer, cls=OrderPlaced):  # noqa: ANN001, ANN202
    seen: list[tuple] = []

    @peer.handler(cls)
    def handle(msg, ctx: MessageContext) -> None:  # noqa: ANN001
        seen.append((msg, ctx))
    return seen


def test_send_is_handled_once_acked_and_logged_marked_direct() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen = _collect(b)
    mid = a.send("B", OrderPlaced("o-1", 100))
    assert [(m, c.message_id, c.sender, c.replay, c.delivery_count) for m, c in seen] == [
        (OrderPlaced("o-1", 100), mid, "A", False, 0)]
    assert [s["message_id"] for s in bus.sends("B")] == [mid]
    assert bus.sends("B")[0]["direct_incarnation"] == b.incarnation
    assert [x["message_id"] for x in bus.acks("B")] == [mid]
    assert bus.unacked("B") == []


def test_per_sender_order_and_exactly_once() -> None:
    bus = TestBus()
    a, c, b = bus.peer("A"), bus.peer("C"), bus.peer("B")
    seen = _collect(b)
    for i in range(200):
        (a if i % 3 else c).send("B", OrderPlaced(f"o-{i}", i))
    by_sender: dict[str, list[int]] = {}
    for msg, ctx in seen:
        by_sender.setdefault(ctx.sender, []).append(msg.amount)
    assert sorted(by_sender["A"] + by_sender["C"]) == list(range(200))
    assert all(v == sorted(v) for v in by_sender.values())
    assert b.stats["handled"] == 200 and not bus.unacked("B")


def test_send_to_a_down_peer_is_logged_and_replayed_on_restart() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen = _collect(b)
    b.stop()
    ids = [a.send("B", OrderPlaced(f"o-{i}", i)) for i in range(5)]
    assert bus.unacked("B") == ids and not seen
    assert all(s["direct_incarnation"] is None for s in bus.sends("B"))
    b2 = bus.restart("B")
    assert [c.message_id for _, c in seen] == ids and all(c.replay for _, c in seen)
    assert b2.incarnation != b.incarnation and not bus.unacked("B")


def test_crash_mid_handler_redelivers_after_restart() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    effects: list[str] = []

    @b.handler
    def on(msg: OrderPlaced, ctx: MessageContext) -> None:
        effects.append(msg.order_id)
        if msg.order_id == "o-2" and not ctx.replay:
            bus.crash("B")  # raises SimulatedCrash: the handler stops midway, no ack
        effects.append(msg.order_id + " done")

    a.send("B", OrderPlaced("o-1", 1))
    a.send("B", OrderPlaced("o-2", 2))
    a.send("B", OrderPlaced("o-3", 3))  # B crashed: direct fails, logged for replay
    assert effects == ["o-1", "o-1 done", "o-2"]
    assert len(bus.unacked("B")) == 2
    bus.restart("B")
    assert effects[3:] == ["o-2", "o-2 done", "o-3", "o-3 done"]
    assert not bus.unacked("B")


def test_crash_after_handler_before_ack_shows_the_duplicate_to_the_handler() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen = _collect(b)
    bus.crash_next("B", OrderPlaced, after_handler=True)
    mid = a.send("B", OrderPlaced("o-1", 1))
    assert len(seen) == 1 and bus.unacked("B") == [mid]
    bus.restart("B")
    assert [c.message_id for _, c in seen] == [mid, mid] and seen[1][1].replay


def test_duplicate_delivery_is_dropped_by_dedup_unless_bypassed() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen = _collect(b)
    mid = a.send("B", OrderPlaced("o-1", 1))
    bus.duplicate(mid, "B")
    assert len(seen) == 1 and b.stats["duplicates"] == 1
    bus.duplicate(mid, "B", bypass_dedup=True)
    assert len(seen) == 2


def test_handler_failure_is_not_acked_and_recorded_then_counted_on_replay() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    counts: list[int] = []

    @b.handler
    def on(msg: OrderPlaced, ctx: MessageContext) -> None:
        counts.append(ctx.delivery_count)
        if ctx.delivery_count < 2:
            raise ValueError("not yet")

    mid = a.send("B", OrderPlaced("o-1", 1))
    assert bus.unacked("B") == [mid] and not bus.acks("B")
    failure = bus.failures("B")[0]
    assert failure["message_id"] == mid and "ValueError: not yet" in failure["reason"]
    bus.restart("B")
    bus.restart("B")
    assert counts == [0, 1, 2] and not bus.unacked("B")


def test_publish_reaches_exactly_the_subscribers() -> None:
    bus = TestBus()
    a, b, c, d = (bus.peer(p) for p in "ABCD")
    seen_b, seen_c = _collect(b, PriceChanged), _collect(c, PriceChanged)
    _collect(d, OrderPlaced)
    a.publish(PriceChanged("sku-1", 5))
    assert len(seen_b) == len(seen_c) == 1 and d.stats.get("received", 0) == 0
    assert sorted(s["recipient"] for s in bus.sends()) == ["B", "C"]
    assert len({s["message_id"] for s in bus.sends()}) == 1


def test_transient_messages_are_direct_only() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen = _collect(b, Ping)
    a.send("B", Ping(1))
    assert len(seen) == 1 and not bus.sends() and not bus.acks()
    b.stop()
    with pytest.raises(PeerUnreachableError, match="B is down"):
        a.send("B", Ping(2))
    a.publish(Ping(3))  # a transient publish skips subscribers that are down


def test_environments_are_isolated() -> None:
    bus = TestBus()
    a = bus.peer("A", "test")
    p = bus.peer("P", "prod")
    with pytest.raises(WrongEnvironmentError, match="environment 'prod'"):
        a.send("P", OrderPlaced("o", 1))
    with pytest.raises(WrongEnvironmentError, match="environment 'test'"):
        p.send("A", OrderPlaced("o", 1))
    assert a.stats["directory_rejected"] >= 1


def test_same_peer_id_twice_is_refused_and_a_crashed_one_is_taken_over() -> None:
    bus = TestBus()
    bus.peer("B")
    with pytest.raises(DuplicatePeerError, match="already running"):
        bus.peer("B")
    bus.crash("B")
    assert bus.peer("B").phase.value == "normal"


def test_unknown_type_and_malformed_payload_are_reported_not_fatal() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen = _collect(b)
    a.send("B", PriceChanged("x", 1))  # B has no handler for it
    core = a._core
    # another incarnation's numbering: A's own next send must not look like a late batch
    bad = core.encode_record("DirectBatch", {"sender": "A", "sender_incarnation": "a0",
                                       "recipient": "B", "environment": "test", "messages": [
        {"message_id": "a0-1", "message_type": "tests.peer.OrderPlaced",
         "payload": b"\x00garbage", "timestamp_ms": 1, "persistent": True},
        {"message_id": "a0-2", "message_type": "nobody.Knows", "payload": b"",
         "timestamp_ms": 1, "persistent": True}]})
    receipt = core._codec.decode(b._core.receive_bytes(bad)).record
    bus.run_until_idle()
    assert receipt["accepted"] == 2 and not seen
    assert b.stats["malformed"] == 1 and b.stats["unknown_type"] == 1
    assert b.stats["no_handler"] == 1
    reasons = {f["message_id"]: f["reason"] for f in bus.failures("B")}
    assert "malformed" in reasons["a0-1"]
    assert "nobody.Knows" in reasons["a0-2"]
    a.send("B", OrderPlaced("o", 1))
    assert len(seen) == 1


def test_oversized_is_refused_before_the_log() -> None:
    bus = TestBus(max_message_bytes=1000)
    a = bus.peer("A")
    bus.peer("B")
    with pytest.raises(OversizedMessageError, match="exceeds max_message_bytes=1000"):
        a.send("B", Blob(b"x" * 2000))
    with pytest.raises(OversizedMessageError):
        a.send("B", Blob(b"x" * 990))  # payload fits, the Send record does not
    assert not bus.sends() and a._core.flight.in_flight == 0


def test_flight_size_raises_with_limit_and_count_while_replicas_are_stalled() -> None:
    bus = TestBus(options=PeerOptions(flight_size=3, flight_mode="raise", ack_linger_ms=0))
    a = bus.peer("A")
    bus.peer("B")
    bus.stall_replicas()
    handles = [a.send_nowait("B", OrderPlaced(f"o-{i}", i), "quorum") for i in range(3)]
    assert not any(h.done() for h in handles)
    with pytest.raises(FlightSizeExceededError, match="3 sends unconfirmed, limit 3"):
        a.send_nowait("B", OrderPlaced("o-3", 3), "quorum")
    bus.resume_replicas()
    assert all(h.done() and h.exception() is None for h in handles)
    a.send("B", OrderPlaced("o-4", 4), "quorum")


def test_async_handlers_and_context() -> None:
    bus = TestBus()
    a, b = bus.peer("A"), bus.peer("B")
    seen: list[str] = []

    @b.handler
    async def on(msg: OrderPlaced, ctx: MessageContext) -> None:
        await asyncio.sleep(0)
        seen.append(f"{msg.order_id}@{ctx.peer_id}")

    a.send("B", OrderPlaced("o-1", 1))
    assert seen == ["o-1@B"] and bus.acks("B")


def test_stopped_peer_refuses_calls_and_bad_arguments_are_clear() -> None:
    bus = TestBus()
    a = bus.peer("A")
    with pytest.raises(ValueError, match="durability"):
        a.send("B", OrderPlaced("o", 1), "sometimes")
    with pytest.raises(PayloadError):
        a.send("B", OrderPlaced("o", "not an int"))  # type: ignore[arg-type]
    a.stop()
    with pytest.raises(PeerStateError, match="stopped"):
        a.send("B", OrderPlaced("o", 1))
    assert isinstance(SimulatedCrash("x"), BaseException)


def test_dead_peer_detection_by_heartbeat() -> None:
    bus = TestBus(options=PeerOptions(heartbeat_ms=1000, dead_after_ms=3000, ack_linger_ms=0))
    a = bus.peer("A")
    bus.peer("B")
    bus.advance(2)
    assert a._core.directory.is_alive("B", bus.now_ms())
    bus.crash("B")
    bus.advance(2)
    assert a._core.directory.is_alive("B", bus.now_ms())  # heartbeat not yet expired
    bus.advance(2)
    assert not a._core.directory.is_alive("B", bus.now_ms())
    a.send("B", OrderPlaced("o", 1))  # logged only, no direct attempt
    assert a.stats.get("direct_failed", 0) == 0 and bus.unacked("B")


def test_wait_until_runs_the_queue_and_names_what_did_not_happen() -> None:
    bus = TestBus(auto_run=False)
    a, b = bus.peer("A"), bus.peer("B")
    seen = _collect(b)
    a.send("B", OrderPlaced("o-1", 1))
    assert not seen
    bus.wait_until(lambda: len(seen) == 1)
    with pytest.raises(TimeoutError, match="two orders: not so once the test bus is idle"):
        bus.wait_until(lambda: len(seen) == 2, what="two orders")


def test_with_real_needs_settings_and_refuses_what_only_memory_has() -> None:
    with pytest.raises(ValueError, match="settings"):
        TestBus(with_real=True)
    real = TestBus(with_real=True, settings=Settings(bootstrap="127.0.0.1:1"))
    for call in (lambda: real.crash("B"), lambda: real.advance(1), real.stall_replicas,
                 lambda: real.dead_letters("B"), lambda: real.sends(), lambda: real.acks()):
        with pytest.raises(RealStackError, match="needs the in-memory bus"):
            call()
