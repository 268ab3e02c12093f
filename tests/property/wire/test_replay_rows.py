"""Replay rows (``log.wire.replay_rows``) against the QueueEntry they are built from: the row
holds the same fields, the peer reads the same envelope from a row as from the QueueEntry
bytes, and a damaged row is refused alike by the decoder and the peer's reader (which skips
and counts it, never raises)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import queue_entries
from tidemark.gossip.replay import ENTRIES_START, encode_entries
from tidemark.log.wire import (
    ROW_TAG,
    RowError,
    decode_row,
    default_codec,
    encode_row,
    entry_record,
    is_row,
    queue_entry,
)
from tidemark.peer_client.columns import Columns
from tidemark.peer_client.replay.entries import EntryReader

C = default_codec()
entries = queue_entries


def _fields(env: object) -> tuple[object, ...]:
    return tuple(getattr(env, f) for f in (
        "message_id", "sender", "message_type", "payload", "timestamp_ms", "persistent",
        "environment", "delivery_count", "replay", "txlog_partition", "txlog_offset"))


@settings(max_examples=300, deadline=None)
@given(entries)
def test_a_row_holds_the_queue_entry_and_reads_as_its_envelope(record: dict) -> None:
    row = encode_row(record)
    assert row is not None and is_row(row) and row[:2] == ROW_TAG
    value = C.encode("QueueEntry", record)
    assert not is_row(value)
    want = {k: v for k, v in record.items() if k != "peer"}
    assert entry_record(row) == entry_record(value) == want
    assert decode_row(row)._asdict() == want
    assert queue_entry(row, record["peer"]) == value  # what a peer without rows is sent
    assert queue_entry(value, "anyone") == value
    reader = EntryReader("env", 3)
    from_row = reader.envelopes([(record["txlog_offset"], row)])
    from_entry = reader.envelopes([(record["txlog_offset"], value)])
    assert [_fields(e) for e in from_row] == [_fields(e) for e in from_entry]
    assert [_fields(e) for e in from_row] == [_fields(reader.envelope(value,
                                                                     record["txlog_offset"]))]
    assert reader.damaged == 0


@settings(max_examples=300, deadline=None)
@given(entries, st.data())
def test_a_damaged_row_is_skipped_and_counted_exactly_when_it_does_not_decode(
        record: dict, data: st.DataObject) -> None:
    row = encode_row(record)
    assert row is not None
    cut = data.draw(st.integers(0, len(row)))
    flip = data.draw(st.integers(0, len(row) - 1))
    bad = bytearray(row)
    bad[flip] ^= data.draw(st.integers(1, 255))
    for damaged in (row[:cut], bytes(bad), row + b"\x00"):
        reader = EntryReader("env", 3)
        got = reader.envelopes([(1, damaged), (2, row)])  # never raises
        try:
            fields = decode_row(damaged)
        except RowError:
            fields = None
        if fields is None:  # not a row, nor QueueEntry bytes
            assert reader.damaged == 1 and len(got) == 1
        else:
            assert reader.damaged == 0 and got[0].message_id == fields.message_id
            assert got[0].payload == fields.payload
        assert _fields(got[-1]) == _fields(reader.envelopes([(2, row)])[0])


def test_fields_too_long_for_a_row_stay_queue_entry_bytes() -> None:
    record = {"peer": "p", "message_id": "m" * 70_000, "sender": "s", "message_type": "t",
              "payload": b"", "timestamp_ms": 1, "txlog_partition": 0, "txlog_offset": 5,
              "delivery_count": 0}
    assert encode_row(record) is None
    assert encode_row({**record, "message_id": "m" * 65_535}) is not None


@settings(max_examples=200, deadline=None)
@given(st.lists(entries, min_size=1, max_size=8), st.data())
def test_columns_hold_what_the_envelopes_hold_or_defer_to_them(records: list[dict],
                                                               data: st.DataObject) -> None:
    """The lean path's reader: an ``E`` message of well-formed rows of the reader's partition
    reads as :class:`Columns` whose envelopes are exactly what ``envelopes`` builds; anything
    else (a damaged row, QueueEntry bytes, another partition) reads as the ``(offset,
    entry)`` pairs sent, and ``envelopes`` reads those."""
    part = data.draw(st.integers(0, 50))
    rows: list[tuple[int, bytes]] = []
    for i, rec in enumerate(records):
        rec = {**rec, "txlog_partition": data.draw(st.sampled_from([part] * 6 + [part + 1]))}
        row = encode_row(rec)
        assert row is not None
        form = data.draw(st.sampled_from(["row"] * 12 + ["entry", "cut"]))
        value = (row if form == "row" else C.encode("QueueEntry", rec) if form == "entry"
                 else row[:data.draw(st.integers(0, len(row) - 1))])
        rows.append((i * 7 + 1, value))
    reader = EntryReader("env", part)
    got, n, last = reader.read_message(encode_entries(1, 0, 0, rows), ENTRIES_START)
    assert (n, last) == (len(rows), rows[-1][0])
    decoded = [_row_or_none(v) for _, v in rows]
    clean = all(r is not None and r.txlog_partition == part for r in decoded)
    assert isinstance(got, Columns) == clean
    if not isinstance(got, Columns):
        assert got == rows  # as sent, for envelopes() to read (and say what is wrong)
        return
    cols = got
    assert len(cols) == len(rows) and cols.partition == part
    assert cols.offsets == [off for off, _ in rows]
    assert [_fields(e) for e in cols.envelopes()] == [_fields(e) for e in reader.envelopes(rows)]
    assert reader.damaged == 0


def _row_or_none(value: bytes) -> object:
    try:
        return decode_row(value)
    except RowError:
        return None
