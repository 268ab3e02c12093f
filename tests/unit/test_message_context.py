"""The handler's MessageContext: read from the arriving message, read-only, compared and
printed by its fields."""

from __future__ import annotations

import pytest

from tidemark.peer_client import MessageContext
from tidemark.peer_client.records import Envelope


def _env(**kw: object) -> Envelope:
    args: dict = {"message_id": "m1", "sender": "al", "message_type": "t", "payload": b"",
                  "timestamp_ms": 7, "persistent": True, "environment": "e",
                  "delivery_count": 2, "replay": True, "txlog_partition": 1,
                  "txlog_offset": 9}
    args.update(kw)
    return Envelope(**args)


def test_fields_come_from_the_message() -> None:
    ctx = MessageContext(_env(), "bob")
    assert (ctx.message_id, ctx.sender, ctx.message_type, ctx.delivery_count, ctx.replay,
            ctx.timestamp_ms, ctx.peer_id, ctx.persistent, ctx.live) == (
        "m1", "al", "t", 2, True, 7, "bob", True, False)


def test_it_is_read_only() -> None:
    ctx = MessageContext(_env(), "bob")
    with pytest.raises(AttributeError):
        ctx.message_id = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ctx.anything = 1  # type: ignore[attr-defined]
    assert ctx.message_id == "m1"


def test_equal_by_fields_and_printed_with_them() -> None:
    a, b = MessageContext(_env(), "bob"), MessageContext(_env(payload=b"x"), "bob")
    assert a == b and hash(a) == hash(b)  # the payload is not part of the context
    assert a != MessageContext(_env(delivery_count=3), "bob")
    assert a != MessageContext(_env(), "carl")
    assert repr(a) == ("MessageContext(message_id='m1', sender='al', message_type='t',"
                       " delivery_count=2, replay=True, timestamp_ms=7, peer_id='bob',"
                       " persistent=True)")
