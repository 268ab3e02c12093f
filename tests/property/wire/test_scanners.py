"""The ingest fast path (log/wire/scanners.py) never accepts a value the full codec rejects,
and for the values it accepts it extracts exactly what the codec decodes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark import schemas
from tidemark.log.exceptions import CodecError
from tidemark.log.wire import (
    ACK,
    ACK_BATCH,
    PURGE,
    SEND,
    Codec,
    ack_batch_header,
    default_codec,
    scanner_for,
    txlog_readers,
    txlog_scanners,
)

CODEC = default_codec()
SCANNERS = txlog_scanners(CODEC)
BATCH = ack_batch_header(CODEC)
text = st.text(max_size=80)
longs = st.integers(-(1 << 63), (1 << 63) - 1)


def sends() -> st.SearchStrategy[bytes]:
    return st.builds(lambda m, s, r, e, t, p, ts, d, i: CODEC.encode("Send", {
        "message_id": m, "sender": s, "recipient": r, "environment": e, "message_type": t,
        "payload": p, "timestamp_ms": ts, "delivery_count": d, "direct_incarnation": i}),
        text, text, text, text, text, st.binary(max_size=300), longs,
        st.integers(-(1 << 31), (1 << 31) - 1), st.none() | text)


def acks() -> st.SearchStrategy[bytes]:
    return st.builds(lambda m, p, e, ts: CODEC.encode("Ack", {
        "message_id": m, "peer": p, "environment": e, "timestamp_ms": ts}), text, text, text, longs)


#: signer (a certificate) and signature of a signed record, or both empty (unsigned)
signers = st.binary(max_size=400)
signatures = st.binary(max_size=80)


def purges() -> st.SearchStrategy[bytes]:
    return st.builds(lambda p, e, ts, c, s: CODEC.encode("Purge", {
        "peer": p, "environment": e, "timestamp_ms": ts, "signer": c, "signature": s}),
        text, text, longs, signers, signatures)


def batches() -> st.SearchStrategy[bytes]:
    return st.builds(lambda p, e, ids, ts, c, s: CODEC.encode("AckBatch", {
        "peer": p, "environment": e, "message_ids": ids, "timestamp_ms": ts, "signer": c,
        "signature": s}), text, text, st.lists(text, max_size=150), longs, signers, signatures)


def expected(value: bytes) -> bytes | tuple | None:
    """What the slow path indexes for ``value`` (None: it is a dead letter); for an
    AckBatch, what its scanner (log/wire/ack_batch_scanner.py) reads."""
    try:
        dec = CODEC.decode(value)
    except CodecError:
        return None
    if dec.name == "AckBatch":
        rec = dec.record
        k = rec["txlog_partition"]
        return (ACK_BATCH, rec["peer"].encode(), [m.encode() for m in rec["message_ids"]],
                rec["timestamp_ms"],
                (k, rec["first_offset"], rec["last_offset"]) if k >= 0 else None)
    if dec.name == "Ack":
        return f"{dec.record['peer']}\0{dec.record['message_id']}".encode()
    if dec.name == "Purge":
        return dec.record["peer"].encode()
    return dec.record["environment"].encode()  # a Send: its environment (ingest filters on it)


def scan(value: bytes) -> bytes | tuple | None:
    if BATCH is not None and value[:10] == BATCH[0]:
        return BATCH[1](value)
    entry = SCANNERS.get(value[:10])
    return None if entry is None else entry[1](value)


def test_every_kind_has_a_scanner() -> None:
    assert sorted(kind for kind, _ in SCANNERS.values()) == [SEND, ACK, PURGE]


@settings(max_examples=300, deadline=None)
@given(st.one_of(sends(), acks(), purges(), batches()))
def test_valid_values_scan_like_the_codec(value: bytes) -> None:
    got = scan(value)
    assert got is None or got == expected(value)  # None only means "ask the codec"
    if len(value) < 200 and value[10:].isascii():
        assert got is not None  # the common case takes the fast path


@settings(max_examples=300, deadline=None)
@given(st.one_of(sends(), acks(), purges(), batches()), st.data())
def test_truncated_or_extended_values_are_never_accepted_wrongly(value: bytes,
                                                                data: st.DataObject) -> None:
    cut = data.draw(st.integers(10, len(value) - 1))
    assert scan(value[:cut]) is None
    assert scan(value + data.draw(st.binary(min_size=1, max_size=5))) is None


@settings(max_examples=500, deadline=None)
@given(st.one_of(sends(), acks(), purges(), batches()), st.data())
def test_mutated_values_agree_with_the_codec(value: bytes, data: st.DataObject) -> None:
    raw = bytearray(value)
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(10, len(raw) - 1))] = data.draw(st.integers(0, 255))
    got = scan(bytes(raw))
    assert got is None or got == expected(bytes(raw))


def test_poison_examples() -> None:
    good = CODEC.encode("Send", {
        "message_id": "m", "sender": "a", "recipient": "peer-x", "environment": "default",
        "message_type": "t", "payload": b"x" * 50, "timestamp_ms": 1, "delivery_count": 0})
    assert scan(good) == b"default"  # a Send's scan is its environment
    assert scan(good[:30]) is None
    assert scan(b"not avro at all") is None
    bad_utf8 = good[:11] + b"\xff" + good[12:]  # message_id "m" -> invalid byte
    assert scan(bad_utf8) is None and expected(bad_utf8) is None


# A Send with more fields appended with defaults than the current schema has: the scanner
# walks them too, and still never accepts what the codec rejects.
_EXTRA = [{"name": "x", "type": ["null", "string"], "default": None},
          {"name": "y", "type": "long", "default": 0},
          {"name": "z", "type": ["null", "bytes", "long"], "default": None}]
_WIDE = dict(schemas.load_schema("Send"))
_WIDE["fields"] = list(_WIDE["fields"]) + _EXTRA
WIDE_CODEC = Codec({"Send": _WIDE})
WIDE_SCAN = scanner_for("Send", _WIDE["fields"])


def wide_sends() -> st.SearchStrategy[bytes]:
    return st.builds(lambda m, i, y, z: WIDE_CODEC.encode("Send", {
        "message_id": m, "sender": "s", "recipient": "r", "environment": "e",
        "message_type": "t", "payload": b"p", "timestamp_ms": 1, "delivery_count": 0,
        "direct_incarnation": i, "x": i, "y": y, "z": z}),
        text, st.none() | text, longs, st.none() | st.binary(max_size=20) | longs)


def test_layouts_with_fields_without_defaults_get_no_scanner() -> None:
    fields = list(schemas.load_schema("Send")["fields"]) + [{"name": "q", "type": "string"}]
    assert scanner_for("Send", fields) is None
    assert scanner_for("Send", list(reversed(schemas.load_schema("Send")["fields"]))) is None
    assert WIDE_SCAN is not None


@settings(max_examples=300, deadline=None)
@given(wide_sends(), st.data())
def test_appended_fields_are_walked_and_mutations_agree_with_the_codec(
        value: bytes, data: st.DataObject) -> None:
    assert WIDE_SCAN is not None
    assert WIDE_SCAN(value) == b"e"
    cut = data.draw(st.integers(10, len(value) - 1))
    assert WIDE_SCAN(value[:cut]) is None
    raw = bytearray(value)
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(10, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        WIDE_CODEC.decode(bytes(raw))
        ok = True
    except CodecError:
        ok = False
    assert WIDE_SCAN(bytes(raw)) is None or ok


def test_direct_incarnation_takes_the_fast_path() -> None:
    for inc in (None, "inc-1"):
        value = CODEC.encode("Send", {
            "message_id": "m", "sender": "a", "recipient": "peer-x", "environment": "default",
            "message_type": "t", "payload": b"x" * 50, "timestamp_ms": 1, "delivery_count": 0,
            "direct_incarnation": inc})
        assert scan(value) == b"default"
        assert scan(value[:-1]) is None and scan(value + b"\0") is None


READERS = txlog_readers(CODEC)


@settings(max_examples=300, deadline=None)
@given(st.one_of(sends(), acks(), purges()))
def test_gc_readers_read_what_the_codec_decodes(value: bytes) -> None:
    kind, peer, msg_id, ts = READERS[value[:10]](value)
    rec = CODEC.decode(value).record
    assert ts == rec["timestamp_ms"]
    if kind == SEND:
        assert (peer, msg_id) == (rec["recipient"].encode(), rec["message_id"].encode())
    elif kind == ACK:
        assert (peer, msg_id) == (rec["peer"].encode(), rec["message_id"].encode())
    else:
        assert kind == PURGE and (peer, msg_id) == (rec["peer"].encode(), b"")
