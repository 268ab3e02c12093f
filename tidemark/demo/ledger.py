"""Ground truth of the demo: what each sender sent and what the receiver's handlers did.

The receiver's handler appends one line per message it handles to a :class:`Ledger` file
and fsyncs it before returning (group commit: one ``fsync`` covers every line written by
then), so a line exists for every message whose handler returned, whatever kill follows.
The ledger also makes the handler idempotent across a crash: a message handled by the
killed incarnation whose ack died with it is replayed to the next one, found in the
ledger and not applied again (counted as ``redelivered``).

:func:`tally` compares the sent ids with the handled ids; it does no I/O beyond reading.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Ledger", "Handled", "read_handled", "read_sent", "tally", "Tally",
           "incarnation_tally"]


@dataclass(frozen=True, slots=True)
class Handled:
    """One ledger line: a message the receiver's handler applied."""

    message_id: str
    sender: str
    kind: str
    n: int
    replay: bool
    incarnation: str


class Ledger:
    """Append-only, fsync'ed record of handled messages (thread-safe). With
    ``keep_repeats`` a repeated id is written too (and still counted in ``redelivered``):
    the file then holds every handler call, for :func:`incarnation_tally`."""

    def __init__(self, path: Path, keep_repeats: bool = False, fsync: bool = True) -> None:
        self.path = path
        self.keep_repeats = keep_repeats
        #: False: lines are written, not fsync'ed (they survive a SIGKILL of the process,
        #: which is all a bench kills, but not a machine crash)
        self.fsync = fsync
        self.ids: set[str] = {h.message_id for h in read_handled(path)}
        self.redelivered = 0          # handled before (by an earlier incarnation): skipped
        self.written = 0
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._seq = 0
        self._synced = 0

    def record(self, h: Handled) -> bool:
        """Apply ``h`` once: False if its id is already in the ledger. Returns once the line
        is on disk."""
        line = (f"{h.message_id}\t{h.sender}\t{h.kind}\t{h.n}\t{int(h.replay)}\t"
                f"{h.incarnation}\n").encode()
        with self._lock:
            repeat = h.message_id in self.ids
            if repeat:
                self.redelivered += 1
                if not self.keep_repeats:
                    return False
            self.ids.add(h.message_id)
            os.write(self._fd, line)
            self._seq += 1
            self.written += 1
            mine = self._seq
        if not self.fsync:
            return not repeat
        with self._sync_lock:
            if self._synced < mine:
                with self._lock:
                    upto = self._seq
                os.fsync(self._fd)
                self._synced = upto
        return not repeat

    def close(self) -> None:
        """Sync and close the file."""
        with self._sync_lock:
            os.fsync(self._fd)
            os.close(self._fd)


def read_handled(path: Path) -> list[Handled]:
    """Every complete line of a ledger file (a torn last line is ignored)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().split("\n"):
        parts = line.split("\t")
        if len(parts) != 6:
            continue
        mid, sender, kind, n, replay, inc = parts
        out.append(Handled(mid, sender, kind, int(n), replay == "1", inc))
    return out


def read_sent(path: Path) -> list[tuple[str, str, int]]:
    """``(message id, kind, n)`` of every send a sender confirmed (``id kind n`` lines)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().split("\n"):
        parts = line.split("\t")
        if len(parts) == 3:
            out.append((parts[0], parts[1], int(parts[2])))
    return out


@dataclass
class Tally:
    """Sent versus handled."""

    sent: int = 0
    handled: int = 0
    live: int = 0
    from_log: int = 0
    lost: list[str] = field(default_factory=list)
    twice: list[str] = field(default_factory=list)
    unexpected: int = 0
    out_of_order: int = 0


def tally(sent: dict[str, list[tuple[str, str, int]]], handled: list[Handled]) -> Tally:
    """Compare: ``sent`` maps each sender to its confirmed sends (in send order)."""
    t = Tally()
    seen: dict[str, int] = {}
    for h in handled:
        seen[h.message_id] = seen.get(h.message_id, 0) + 1
        if h.replay:
            t.from_log += 1
        else:
            t.live += 1
    t.handled = len(handled)
    t.twice = sorted(m for m, c in seen.items() if c > 1)
    all_sent = {mid for rows in sent.values() for mid, _, _ in rows}
    t.sent = len(all_sent)
    t.lost = sorted(all_sent - seen.keys())
    t.unexpected = len(seen.keys() - all_sent)
    last: dict[tuple[str, str], int] = {}
    for h in handled:            # per sender and kind, ns must rise in the order handled
        key = (h.sender, h.kind)
        if h.n < last.get(key, -1):
            t.out_of_order += 1
        last[key] = max(h.n, last.get(key, -1))
    return t


def incarnation_tally(sent: dict[str, list[tuple[str, str, int]]], handled: list[Handled],
                      killed: set[str], acked: set[str]) -> dict[str, Any]:
    """Sent versus handled when the ledger holds every handler call (``keep_repeats``) and
    some incarnations were killed.

    A message handled by a killed incarnation whose ack died with it is legitimately
    handled again by the next one: ``redelivered_after_crash``. The violations are an id
    handled twice by one incarnation (``twice_same_incarnation``) and an id handled again
    after its ack was in txlog (``twice_after_ack``; ``acked``: the ids a killed
    incarnation's acks covered). ``out_of_order``: per incarnation and sender, a Tick
    handled after a later one of its sender (a redelivered message comes before the new
    ones of its incarnation, so it is no violation)."""
    by_id: dict[str, list[str]] = {}
    for h in handled:
        by_id.setdefault(h.message_id, []).append(h.incarnation)
    same, after_ack, crash = [], [], []
    for mid, incs in by_id.items():
        if len(incs) == 1:
            continue
        if len(set(incs)) < len(incs):
            same.append(mid)
        elif mid in acked:
            after_ack.append(mid)
        elif all(i in killed for i in incs[:-1]):
            crash.append(mid)
        else:
            same.append(mid)  # handled again after an incarnation that was not killed
    all_sent = {mid for rows in sent.values() for mid, _, _ in rows}
    lost = sorted(all_sent - by_id.keys())
    last: dict[tuple[str, str, str], int] = {}
    disorder = 0
    for h in handled:
        key = (h.incarnation, h.sender, h.kind)
        if h.n < last.get(key, -1):
            disorder += 1
        last[key] = max(h.n, last.get(key, -1))
    return {"sent": len(all_sent), "handled_calls": len(handled), "handled": len(by_id),
            "from_log": sum(1 for h in handled if h.replay),
            "live": sum(1 for h in handled if not h.replay),
            "lost": len(lost), "lost_ids": lost[:20],
            "twice_same_incarnation": len(same), "twice_after_ack": len(after_ack),
            "applied_twice": len(same) + len(after_ack),
            "twice_ids": sorted(same + after_ack)[:20],
            "redelivered_after_crash": len(crash),
            "unexpected": len(by_id.keys() - all_sent), "out_of_order": disorder}
