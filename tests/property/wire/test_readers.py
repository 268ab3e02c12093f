"""The generated flat readers decode exactly what fastavro decodes (or fail the same way):
txlog values the queues job reads and QueueEntry values of the replay
(``log.wire.RecordReader``), the peer's replay reader, and the payloads of flat dataclasses
(``AvroSerializer.decode``)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import long, queue_entries, text
from tidemark.log.exceptions import CodecError
from tidemark.log.wire import RecordReader, compile_flat_reader, default_codec
from tidemark.peer_client.exceptions import PayloadError
from tidemark.peer_client.records import Envelope
from tidemark.peer_client.serializers import AvroSerializer

C = default_codec()
READER = RecordReader(C, ("QueueEntry",))
entries = queue_entries


def _view(decode: object, value: bytes) -> object:
    try:
        d = decode(value)  # type: ignore[operator]
        return d.name, d.record
    except CodecError as exc:
        return type(exc)


def _damaged(value: bytes, data: st.DataObject) -> list[bytes]:
    cut = data.draw(st.integers(0, len(value)))
    flip = data.draw(st.integers(0, len(value) - 1))
    bad = bytearray(value)
    bad[flip] ^= data.draw(st.integers(1, 255))
    return [value[:cut], bytes(bad), value + b"\x00"]


def test_the_queue_entry_reader_is_generated() -> None:
    assert compile_flat_reader(C._named["QueueEntry"]) is not None
    value = C.encode("QueueEntry", {"peer": "p", "message_id": "m", "sender": "s",
                                    "message_type": "t", "payload": b"x", "timestamp_ms": 1,
                                    "txlog_partition": 2, "txlog_offset": 300})
    assert READER.read(value) == C.decode(value).record
    assert READER.read(value[:-1]) is None and READER.read(None) is None


@settings(max_examples=400, deadline=None)
@given(entries, st.data())
def test_queue_entry_reader_matches_the_codec(record: dict, data: st.DataObject) -> None:
    value = C.encode("QueueEntry", record)
    assert _view(READER.decode, value) == _view(C.decode, value) == ("QueueEntry", record)
    for bad in _damaged(value, data):
        assert _view(READER.decode, bad) == _view(C.decode, bad)


def _envelope_view(read: object, value: bytes) -> object:
    try:
        env = read(value, 7)  # type: ignore[operator]
    except CodecError as exc:
        return type(exc)
    return (env.message_id, env.sender, env.message_type, env.payload, env.timestamp_ms,
            env.environment, env.delivery_count, env.replay, env.txlog_partition,
            env.txlog_offset, env.persistent)


@settings(max_examples=300, deadline=None)
@given(entries, st.data())
def test_replay_reads_the_same_envelope_as_the_codec_without_a_dict(
        record: dict, data: st.DataObject) -> None:
    """The peer's replay reads QueueEntry values field by field (a tuple reader); what it
    builds is what the codec's record gives, and damaged values fail alike."""
    from tidemark.peer_client.replay import EntryReader
    reader = EntryReader("env", 3)
    assert reader.fast  # the tuple reader is in use for the current schema

    def by_codec(value: bytes, offset: int) -> Envelope:
        rec = C.decode(value).record
        return Envelope(rec["message_id"], rec["sender"], rec["message_type"],
                        rec["payload"], rec["timestamp_ms"], True, "env",
                        rec["delivery_count"], True, rec["txlog_partition"], offset)
    value = C.encode("QueueEntry", record)
    assert _envelope_view(reader.envelope, value) == _envelope_view(by_codec, value)
    for bad in _damaged(value, data):
        assert _envelope_view(reader.envelope, bad) == _envelope_view(by_codec, bad)


@dataclass
class Flat:
    name: str
    blob: bytes
    n: int
    ok: bool
    note: str | None = None
    count: int | None = None


FLAT = AvroSerializer(Flat, "unit.Flat")
flats = st.builds(Flat, text, st.binary(max_size=100), long, st.booleans(),
                  st.one_of(st.none(), text), st.one_of(st.none(), long))


def _payload_view(decode: object, data: bytes) -> object:
    try:
        return decode(data)  # type: ignore[operator]
    except PayloadError:
        return PayloadError


def _generic(data: bytes) -> object:
    """The decoder without the generated readers (fastavro's generic one)."""
    fast, args = FLAT._fast_read, FLAT._fast_args
    FLAT._fast_read = FLAT._fast_args = None
    try:
        return FLAT.decode(data)
    finally:
        FLAT._fast_read, FLAT._fast_args = fast, args


def _by_dict(data: bytes) -> object:
    """The decoder through the generated dict reader (the constructor called by name)."""
    args, FLAT._fast_args = FLAT._fast_args, None
    try:
        return FLAT.decode(data)
    finally:
        FLAT._fast_args = args


def test_a_flat_dataclass_gets_a_generated_payload_reader() -> None:
    assert FLAT._fast_read is not None
    assert FLAT._fast_args is not None  # no field to convert: read straight into Flat(...)

    @dataclass
    class Nested:
        inner: Flat

    assert AvroSerializer(Nested, "unit.Nested")._fast_read is None
    assert AvroSerializer(Nested, "unit.Nested")._fast_args is None


@settings(max_examples=300, deadline=None)
@given(flats, st.data())
def test_payload_reader_matches_fastavro(obj: Flat, data: st.DataObject) -> None:
    payload = FLAT.encode(obj)
    assert FLAT.decode(payload) == _by_dict(payload) == _generic(payload) == obj
    for bad in _damaged(payload, data):
        assert (_payload_view(FLAT.decode, bad) == _payload_view(_by_dict, bad)
                == _payload_view(_generic, bad))


TXLOG = RecordReader(C)  # Send, Ack, Purge: what the queues job reads
txlog_records = st.one_of(
    st.tuples(st.just("Send"), st.fixed_dictionaries({
        "message_id": text, "sender": text, "recipient": text, "environment": text,
        "message_type": text, "payload": st.binary(max_size=300), "timestamp_ms": long,
        "delivery_count": st.integers(-(1 << 31), (1 << 31) - 1),
        "direct_incarnation": st.one_of(st.none(), text)})),
    st.tuples(st.just("Ack"), st.fixed_dictionaries({
        "message_id": text, "peer": text, "environment": text, "timestamp_ms": long})),
    st.tuples(st.just("Purge"), st.fixed_dictionaries({
        "peer": text, "environment": text, "timestamp_ms": long})))


@settings(max_examples=400, deadline=None)
@given(txlog_records, st.data())
def test_the_txlog_reader_matches_the_codec(case: tuple[str, dict], data: st.DataObject) -> None:
    name, record = case
    fields = {f["name"] for f in C._named[name]["fields"]}
    value = C.encode(name, {k: v for k, v in record.items() if k in fields})
    assert TXLOG.read(value) == C.decode(value).record
    assert _view(TXLOG.decode, value) == _view(C.decode, value)
    for bad in _damaged(value, data):
        assert _view(TXLOG.decode, bad) == _view(C.decode, bad)
