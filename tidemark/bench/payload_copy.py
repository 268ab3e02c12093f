"""One copy of the payload or two, measured on a replica's LevelDB: ``python -m
tidemark.bench.payload_copy [--messages N] [--payload-bytes B] [--share S] [--rounds R]
[--json]``.

A replica stores each txlog record (``D t k off``: the Send, payload included) and, for a
queued message, its queue entry and queue index entry, the latter carrying the replay row
(payload included) so that a replay streams a peer's queue with one iterator. Two layouts
are written side by side into two fresh stores, with the replica's own LevelDB options:

* ``copy`` (what replicas do): the Send, the QueueEntry and the index entry with the full
  replay row; a replay iterates the index and cuts each row;
* ``reference``: the Send, a QueueEntry without its payload and an index entry whose row
  names where the payload lies inside the Send; a replay iterates the index and reads each
  payload from the Send (one ``get`` per message, in offset order).

The recipient's Sends are ``S`` of the partition (the rest are other peers', as a shared
txlog partition holds). Per message it reports the bytes written, the store's size on disk
after a full compaction, the writing thread's CPU and a replay's CPU (``time.thread_time``;
medians of ``R`` rounds), the reference layout beside the copy layout of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import plyvel

from tidemark.log.wire import HEAD_SIZE, ROW_HEAD, ROW_TAG, default_codec, encode_row
from tidemark.replica.keys import data_key, queue_index_key, queue_prefix
from tidemark.replica.store import StoreOptions

__all__ = ["payload_copy", "main"]

_H = struct.Struct(">H")
_SPAN = struct.Struct(">II")  # payload start and length inside the Send's bytes
_PARTITION, _PEER = 3, "replayer"


def _records(n: int, payload_bytes: int, share: float) -> list[tuple[int, bytes, dict]]:
    """``(offset, Send bytes, QueueEntry record or {})`` of a txlog partition in which
    ``share`` of the Sends are to the replaying peer (``n`` of them)."""
    codec, out, offset, mine = default_codec(), [], 0, 0
    step = max(1, round(1 / share))
    while mine < n:
        recipient = _PEER if offset % step == 0 else f"other-{offset % 97}"
        payload = os.urandom(payload_bytes)
        send = {"message_id": f"inc-{offset:09d}", "sender": "sender-1",
                "recipient": recipient, "environment": "bench",
                "message_type": "bench.Payload", "payload": payload,
                "timestamp_ms": 1_700_000_000_000 + offset, "delivery_count": 0,
                "direct_incarnation": None}
        entry: dict = {}
        if recipient == _PEER:
            entry = {"peer": _PEER, "message_id": send["message_id"], "sender": "sender-1",
                     "message_type": "bench.Payload", "payload": payload,
                     "timestamp_ms": send["timestamp_ms"], "txlog_partition": _PARTITION,
                     "txlog_offset": offset, "delivery_count": 0}
            mine += 1
        out.append((offset, codec.encode("Send", send), entry))
        offset += 1
    return out


def _write(db: Any, records: list[tuple[int, bytes, dict]], reference: bool) -> int:
    """Write ``records`` in the layout; returns the bytes of keys and values written."""
    codec, written = default_codec(), 0
    wb = db.write_batch()
    for i, (offset, send, entry) in enumerate(records):
        puts = [(data_key(_PARTITION, offset), send)]
        if entry:
            key = f"{_PEER}\0{entry['message_id']}".encode()
            if reference:
                payload = entry["payload"]
                start = send.index(payload)  # where the Send's encoder put it
                stored = codec.encode("QueueEntry", {**entry, "payload": b""})
                head = encode_row({**entry, "payload": b""})
                row = None if head is None else head + _SPAN.pack(start, len(payload))
            else:
                stored = codec.encode("QueueEntry", entry)
                row = encode_row(entry)
            if row is None:
                raise ValueError("a bench entry does not fit a replay row")
            puts.append((queue_prefix(_PARTITION) + key, stored))
            puts.append((queue_index_key(_PARTITION, _PEER, offset),
                         b"".join((b"\0", _H.pack(len(key)), key, row))))
        for k, v in puts:
            wb.put(k, v)
            written += len(k) + len(v)
        if i % 1000 == 999:
            wb.write()
            wb = db.write_batch()
    wb.write()
    return written


def _replay(db: Any, reference: bool) -> int:
    """Read the peer's queue as a replay does (ids, names, payload of each); returns the
    payload bytes read (so nothing is optimized away)."""
    unpack, total = ROW_HEAD.unpack_from, 0
    prefix = queue_index_key(_PARTITION, _PEER, 0)[:-8]
    get = db.get
    with db.snapshot() as snap:
        get = snap.get
        for value in snap.iterator(prefix=prefix, include_key=False):
            klen = _H.unpack_from(value, 1)[0]
            row = value[3 + klen:]
            if row[:2] != ROW_TAG:
                raise ValueError("not a row")
            ts, off, part, count, a, b, c, d = unpack(row, 2)
            p = HEAD_SIZE
            mid = row[p:p + a].decode()
            sender = row[p + a:p + a + b].decode()
            mtype = row[p + a + b:p + a + b + c].decode()
            if reference:
                start, length = _SPAN.unpack_from(row, p + a + b + c)
                send = get(data_key(part, off))
                payload = send[start:start + length]
            else:
                payload = row[p + a + b + c:]
            total += len(payload) + len(mid) + len(sender) + len(mtype) + (ts & 1)
    return total


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.suffix in (".ldb", ".log"))


def payload_copy(messages: int = 200_000, payload_bytes: int = 150, share: float = 0.25,
                 rounds: int = 3) -> dict[str, Any]:
    """Both layouts' figures per message (medians of ``rounds``) and their ratios."""
    records = _records(messages, payload_bytes, share)
    samples: dict[str, dict[str, list[float]]] = {"copy": {}, "reference": {}}
    for _ in range(rounds):
        for name in samples:  # side by side in each round
            folder = Path(tempfile.mkdtemp(prefix=f"tidemark-{name}-"))
            try:
                db = plyvel.DB(str(folder), create_if_missing=True,
                               **StoreOptions().leveldb())
                t0 = time.thread_time()
                written = _write(db, records, name == "reference")
                write_us = (time.thread_time() - t0) / messages * 1e6
                db.compact_range()
                t0 = time.thread_time()
                read = _replay(db, name == "reference")
                replay_us = (time.thread_time() - t0) / messages * 1e6
                assert read >= messages * payload_bytes
                disk = _du(folder)
                db.close()
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            for key, value in (("written_bytes", written / messages),
                               ("disk_bytes", disk / messages),
                               ("write_us", write_us), ("replay_us", replay_us)):
                samples[name].setdefault(key, []).append(value)
    out: dict[str, Any] = {"messages": messages, "payload_bytes": payload_bytes,
                           "share": share, "rounds": rounds, "per_message": {}}
    for name, figures in samples.items():
        out["per_message"][name] = {k: round(statistics.median(v), 3)
                                    for k, v in figures.items()}
    copy, ref = out["per_message"]["copy"], out["per_message"]["reference"]
    out["reference_over_copy"] = {k: round(ref[k] / copy[k], 3) for k in copy if copy[k]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tidemark.bench.payload_copy",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000, help="the peer's queued messages")
    ap.add_argument("--payload-bytes", type=int, default=150, help="payload size")
    ap.add_argument("--share", type=float, default=0.25,
                    help="the peer's share of the txlog partition's Sends")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (medians are reported)")
    ap.add_argument("--json", action="store_true", help="one JSON document")
    args = ap.parse_args(argv)
    if not 0 < args.share <= 1 or args.messages <= 0 or args.payload_bytes <= 0:
        ap.error("--share must be in (0, 1], --messages and --payload-bytes positive")
    result = payload_copy(args.messages, args.payload_bytes, args.share, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.messages} queued messages of {args.payload_bytes} B, "
          f"{args.share:.0%} of their partition; medians of {args.rounds} rounds, per message")
    print(f"{'':22}{'copy (now)':>12}{'reference':>12}{'ratio':>8}")
    labels = {"written_bytes": "bytes written", "disk_bytes": "bytes on disk",
              "write_us": "write CPU (us)", "replay_us": "replay CPU (us)"}
    copy, ref = result["per_message"]["copy"], result["per_message"]["reference"]
    for key, label in labels.items():
        print(f"{label:22}{copy[key]:>12.2f}{ref[key]:>12.2f}"
              f"{result['reference_over_copy'].get(key, 0):>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
