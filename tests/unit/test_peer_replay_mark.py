"""The txlog follower's cheap check of ``Send.direct_incarnation`` matches the marking."""

from __future__ import annotations

from tidemark.log.codec import MARKER
from tidemark.peer_client.avro_fast import SendEncoder
from tidemark.peer_client.records import mark_direct, peer_codec
from tidemark.peer_client.replay.follower import _mark_suffix


def test_mark_suffix_is_the_end_of_a_marked_send() -> None:
    codec = peer_codec()
    enc = SendEncoder(MARKER + codec.fingerprint_of("Send"), "A", "test", codec.schema("Send"))
    value = enc.encode("m-1", "B", "t.T", b"payload", 1)
    for inc in ("abc", "0123456789abcdef", "x" * 70):
        marked = mark_direct(value, inc)
        assert marked.endswith(_mark_suffix(inc))
        assert codec.decode(marked).record["direct_incarnation"] == inc
        assert not value.endswith(_mark_suffix(inc))
        assert not mark_direct(value, inc + "y").endswith(_mark_suffix(inc))
