"""The AckBatch fast path (log/wire/ack_batch_scanner.py) reads exactly what the codec decodes
from every AckBatch a peer writes, in one block or several, with fields appended, and GC
reads batches through it. (Truncated, extended and mutated values are checked with the
other scanners' in test_scanners.py.)"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark import schemas
from tidemark.log.exceptions import CodecError
from tidemark.log.wire import (
    ACK_BATCH,
    MARKER,
    Codec,
    ack_batch_header,
    ack_batch_scanner,
    admission_scanner,
    default_codec,
    scan_ack_batch,
    varint,
    zigzag_long,
)
from tidemark.replica.release_policy import _fields, _readers

CODEC = default_codec()
HEADER = ack_batch_header(CODEC)
text = st.text(max_size=80)
longs = st.integers(-(1 << 63), (1 << 63) - 1)
#: no range (-1s, as written without one) or any range, well-formed or not (the scanner
#: reports it; ingest decides whether it indexes by it)
spans = st.just((-1, -1, -1)) | st.tuples(st.integers(-(1 << 31), (1 << 31) - 1), longs, longs)


def batches() -> st.SearchStrategy[bytes]:
    """AckBatches as peers write them: unsigned (empty signer and signature) or signed (a
    certificate and a signature of any length: the scanner walks them, never checks them)."""
    return st.builds(lambda p, e, ids, ts, span, signer, sig: CODEC.encode("AckBatch", {
        "peer": p, "environment": e, "message_ids": ids, "timestamp_ms": ts,
        "txlog_partition": span[0], "first_offset": span[1], "last_offset": span[2],
        "signer": signer, "signature": sig}),
        text, text, st.lists(text, max_size=150), longs, spans, st.binary(max_size=600),
        st.binary(max_size=80))


def expected(value: bytes) -> tuple[int, bytes, list[bytes], int, tuple | None] | None:
    """What the codec reads from ``value`` (None: it is a dead letter)."""
    try:
        dec = CODEC.decode(value)
    except CodecError:
        return None
    if dec.name != "AckBatch":
        return None
    rec = dec.record
    k = rec["txlog_partition"]
    return (ACK_BATCH, rec["peer"].encode(), [m.encode() for m in rec["message_ids"]],
            rec["timestamp_ms"], (k, rec["first_offset"], rec["last_offset"]) if k >= 0 else None)


def test_the_current_schema_has_a_scanner() -> None:
    assert HEADER is not None and HEADER[0] == MARKER + CODEC.fingerprint_of("AckBatch")


@settings(max_examples=300, deadline=None)
@given(batches())
def test_valid_batches_scan_like_the_codec(value: bytes) -> None:
    assert scan_ack_batch(value) == expected(value)  # valid: always the fast path


ADMIT_SCAN = admission_scanner(list(schemas.load_schema("AckBatch")["fields"]))


def expected_view(value: bytes) -> tuple | None:
    """What a component checking the admission reads from ``value`` with the codec."""
    try:
        rec = CODEC.decode(value).record
    except CodecError:
        return None
    return expected(value), {k: rec[k] for k in ("peer", "environment", "timestamp_ms",
                                                 "signer", "signature")}


@settings(max_examples=300, deadline=None)
@given(batches(), st.integers(0, 60), st.integers(1, 255), st.integers(0, 3))
def test_the_admission_scan_reads_what_the_admission_checks_like_the_codec(
        value: bytes, at: int, flip: int, cut: int) -> None:
    """The replica's AckBatch fast path under an admission: the scanner's fields plus the
    environment, signer, signature, peer and time the check reads, exactly as the codec
    decodes them; a damaged value it cannot vouch for gives None (the codec then decides)."""
    assert ADMIT_SCAN is not None
    assert ADMIT_SCAN(value) == expected_view(value)
    bad = bytearray(value)
    bad[min(10 + at, len(bad) - 1)] ^= flip  # the header is the caller's check
    for damaged in (bytes(bad), value[:len(value) - cut] if cut else value + b"\0"):
        got = ADMIT_SCAN(damaged)
        assert got is None or got == expected_view(damaged)


def test_the_admission_scan_needs_the_signed_ranged_layout() -> None:
    fields = list(schemas.load_schema("AckBatch")["fields"])
    assert admission_scanner(fields) is not None
    assert admission_scanner(fields[:-1]) is None
    assert admission_scanner(fields + _EXTRA) is None


def _blocks(peer: str, ids: list[str], sizes: list[int], ts: int, sized: bool,
            signer: bytes = b"", signature: bytes = b"") -> bytes:
    """An AckBatch whose array is written in blocks of ``sizes`` ids (``sized``: each block
    with a negative count and its byte size, as Avro allows)."""
    def s(x: str) -> bytes:
        raw = x.encode()
        return varint(len(raw) << 1) + raw
    out = [MARKER + CODEC.fingerprint_of("AckBatch"), s(peer), s("default")]
    i = 0
    for n in sizes:
        body = b"".join(s(m) for m in ids[i:i + n])
        i += n
        out.append(zigzag_long(-n) + zigzag_long(len(body)) if sized else zigzag_long(n))
        out.append(body)
    out.append(b"\0")
    out.append(zigzag_long(ts))
    out.append(zigzag_long(-1) * 3)  # no range
    out.append(zigzag_long(len(signer)) + signer + zigzag_long(len(signature)) + signature)
    return b"".join(out)


@settings(max_examples=200, deadline=None)
@given(st.lists(text, min_size=1, max_size=60), st.data(), st.booleans(), longs,
       st.binary(max_size=300), st.binary(max_size=80))
def test_arrays_in_several_blocks_read_like_the_codec(ids: list[str], data: st.DataObject,
                                                       sized: bool, ts: int, signer: bytes,
                                                       signature: bytes) -> None:
    sizes: list[int] = []
    left = len(ids)
    while left:
        n = data.draw(st.integers(1, left))
        sizes.append(n)
        left -= n
    value = _blocks("peer-é", ids, sizes, ts, sized, signer, signature)
    assert expected(value) is not None
    assert scan_ack_batch(value) == expected(value)


def test_poison_examples() -> None:
    good = CODEC.encode("AckBatch", {"peer": "p", "environment": "default",
                                     "message_ids": ["m-1", "m-2"], "timestamp_ms": 7})
    assert scan_ack_batch(good) == (ACK_BATCH, b"p", [b"m-1", b"m-2"], 7, None)
    ranged = CODEC.encode("AckBatch", {"peer": "p", "environment": "default",
                                       "message_ids": ["m-1"], "timestamp_ms": 7,
                                       "txlog_partition": 2, "first_offset": 40,
                                       "last_offset": 90})
    assert scan_ack_batch(ranged) == (ACK_BATCH, b"p", [b"m-1"], 7, (2, 40, 90))
    bad_utf8 = good.replace(b"m-2", b"m\xff2")
    assert scan_ack_batch(bad_utf8) is None and expected(bad_utf8) is None
    assert good.endswith(b"\1\1\1\0\0")  # no range (-1s); unsigned: signer, signature empty
    count_at = 10 + 2 + 8  # after the header, "p" and "default"
    assert good[count_at] == 4  # two ids, zigzag-encoded
    huge_count = good[:count_at] + zigzag_long(1 << 40) + good[count_at + 1:]
    assert scan_ack_batch(huge_count) is None
    assert scan_ack_batch(b"not avro at all") is None


_EXTRA = [{"name": "x", "type": ["null", "string"], "default": None},
          {"name": "y", "type": "long", "default": 0}]
_WIDE = dict(schemas.load_schema("AckBatch"))
_WIDE["fields"] = list(_WIDE["fields"]) + _EXTRA
WIDE_CODEC = Codec({"AckBatch": _WIDE})
WIDE_SCAN = ack_batch_scanner(_WIDE["fields"])


def test_layouts_the_scanner_does_not_walk_get_none() -> None:
    fields = list(schemas.load_schema("AckBatch")["fields"])
    assert ack_batch_scanner(fields + [{"name": "q", "type": "string"}]) is None
    assert ack_batch_scanner(list(reversed(fields))) is None
    assert WIDE_SCAN is not None


@settings(max_examples=200, deadline=None)
@given(st.lists(text, max_size=20), st.none() | text, longs, st.data())
def test_appended_fields_are_walked(ids: list[str], x: str | None, y: int,
                                    data: st.DataObject) -> None:
    assert WIDE_SCAN is not None
    value = WIDE_CODEC.encode("AckBatch", {"peer": "p", "environment": "e", "message_ids": ids,
                                           "timestamp_ms": 3, "x": x, "y": y})
    assert WIDE_SCAN(value) == (ACK_BATCH, b"p", [m.encode() for m in ids], 3, None)
    assert WIDE_SCAN(value[:data.draw(st.integers(10, len(value) - 1))]) is None


@settings(max_examples=200, deadline=None)
@given(batches())
def test_gc_reads_batches_like_the_codec(value: bytes) -> None:
    assert value[:10] in _readers()
    assert _fields(_readers(), value) == expected(value)
