"""Byte patching (``log.wire.patching``): a re-marked Send is the Send encoded with the mark,
and the txlog follower's cheap check (the mark is the value's suffix) matches the marking."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.log.wire import MARKER, SendEncoder, default_codec, direct_mark, mark_direct

#: 8 KiB strings and bytes (past the length table) are large inputs on purpose
BIG = [HealthCheck.data_too_large]
CODEC = default_codec()


@settings(max_examples=200, deadline=None, suppress_health_check=BIG)
@given(st.text(min_size=1, max_size=30), st.binary(max_size=300),
       st.text(min_size=1, max_size=40) | st.text(min_size=8190, max_size=8200, alphabet="ab"))
def test_mark_direct_equals_encoding_with_the_mark(recipient: str, payload: bytes,
                                                   incarnation: str) -> None:
    rec = {"message_id": "m-1", "sender": "A", "recipient": recipient, "environment": "test",
           "message_type": "x.Y", "payload": payload, "timestamp_ms": 17, "delivery_count": 0,
           "direct_incarnation": None}
    plain = CODEC.encode("Send", rec)
    marked = mark_direct(plain, incarnation)
    assert marked == CODEC.encode_with_fastavro("Send", {**rec, "direct_incarnation": incarnation})
    assert CODEC.decode(marked).record["direct_incarnation"] == incarnation
    assert marked.endswith(direct_mark(incarnation)) and not plain.endswith(direct_mark(incarnation))


def test_the_mark_is_the_end_of_a_marked_send() -> None:
    enc = SendEncoder(MARKER + CODEC.fingerprint_of("Send"), "A", "test", CODEC.schema("Send"))
    value = enc.encode("m-1", "B", "t.T", b"payload", 1)
    for inc in ("abc", "0123456789abcdef", "x" * 70):
        marked = mark_direct(value, inc)
        assert marked.endswith(direct_mark(inc))
        assert CODEC.decode(marked).record["direct_incarnation"] == inc
        assert not value.endswith(direct_mark(inc))
        assert not mark_direct(value, inc + "y").endswith(direct_mark(inc))
