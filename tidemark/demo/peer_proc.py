"""One demo peer as its own OS process (so the demo's SIGKILL is real).

    python -m tidemark.demo.peer_proc receiver --id B --ledger B.ledger --dedup-dir dedup
    python -m tidemark.demo.peer_proc sender --id A --to B --rate 150 --sent A.sent

Both print JSON lines on stdout: ``{"t": "ready", ...}`` once started, ``{"t": "status",
...}`` every ``--every`` seconds, and ``{"t": "final", ...}`` after ``stop`` was read on
stdin (the peer stops cleanly, then the process exits 0). Every line carries ``ts``, the
wall-clock time it was written.

* **receiver**: a :class:`~tidemark.peer_client.Peer` with a
  :class:`~tidemark.peer_client.replay.ReplicaReplayer` (replay on start) and, with ``--dedup-dir``,
  the library's persisted dedup (``PeerOptions.dedup_dir``: a message whose handler returned
  before a SIGKILL is not handed to B's next incarnation again); its handlers record every
  Tick and Note in a fsync'ed :class:`~tidemark.demo.ledger.Ledger` before returning.
* **sender**: sends Ticks to ``--to`` at ``--rate`` per second and publishes a Note every
  ``--publish-every`` sends; each id is written to ``--sent`` once the send returned (the
  Send is in txlog).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.log.settings import load_settings
from tidemark.peer_client import Delivery, MessageContext, Peer, PeerOptions, message

__all__ = ["Tick", "Note", "main"]


@message("demo.Tick")
@dataclass
class Tick:
    """A point-to-point message: the ``n``-th Tick of its sender."""

    n: int


@message("demo.Note")
@dataclass
class Note:
    """A published message: the ``n``-th Note of its sender."""

    n: int


_out_lock = threading.Lock()


def emit(doc: dict[str, Any]) -> None:
    """One JSON line on stdout, stamped with the wall-clock time (``ts``)."""
    line = json.dumps({**doc, "ts": time.time()})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _status_loop(every: float, make: Any, done: threading.Event) -> None:
    while not done.wait(every):
        try:
            emit({"t": "status", **make()})
        except Exception as exc:  # noqa: BLE001 - a status line is best effort
            emit({"t": "status", "error": str(exc)})


def _wait_stop() -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            return


def run_receiver(args: argparse.Namespace) -> int:
    """The receiver: replay on start, record every handled message, stop on ``stop``."""
    from tidemark.demo.ledger import Handled, Ledger
    from tidemark.peer_client.context import Phase
    from tidemark.peer_client.replay import ReplicaReplayer
    settings = load_settings(state_dir=args.state_dir)
    ledger = Ledger(Path(args.ledger), keep_repeats=args.keep_repeats,
                    fsync=not args.no_fsync)
    peer = Peer(args.id, None, settings, PeerOptions(heartbeat_ms=500, dead_after_ms=5000,
                                                     dedup_dir=args.dedup_dir),
                replayer=ReplicaReplayer(settings))
    pause = args.handler_ms / 1000

    def on(kind: str) -> Any:
        def handle(msg: Any, ctx: MessageContext) -> None:
            if pause > 0:
                time.sleep(pause)  # --handler-ms: a handler that takes this long
            ledger.record(Handled(ctx.message_id, ctx.sender, kind, msg.n, ctx.replay,
                                  peer.incarnation))
        return handle

    peer.handler(Tick)(on("tick"))
    peer.handler(Note)(on("note"))

    def status() -> dict[str, Any]:
        st = peer.status()
        return {"phase": st["phase"], "incarnation": peer.incarnation,
                "replayed": st.get("replayed", 0), "forwarded": st.get("forwarded", 0),
                "replay": st.get("replay", {}), "held": st.get("held", {}),
                "stats": st["stats"], "ledger": ledger.written,
                "redelivered": ledger.redelivered}

    done = threading.Event()

    def watch_normal() -> None:
        while not done.wait(0.02):
            if peer.phase is Phase.NORMAL:
                emit({"t": "normal", **status()})
                return

    threading.Thread(target=_status_loop, args=(args.every, status, done), daemon=True).start()
    emit({"t": "starting", "incarnation": peer.incarnation})
    threading.Thread(target=watch_normal, daemon=True, name="watch-normal").start()
    peer.start()
    emit({"t": "ready", **status()})
    _wait_stop()
    done.set()
    final = status()
    peer.stop()
    ledger.close()
    emit({"t": "final", **final, "phase": "stopped"})
    return 0


def run_sender(args: argparse.Namespace) -> int:
    """The sender: Ticks to ``--to`` at ``--rate``, a Note every ``--publish-every``."""
    settings = load_settings(state_dir=args.state_dir)
    sent_file = Path(args.sent).open("a", encoding="utf-8")  # noqa: SIM115 - closed below
    stop = threading.Event()
    counts = {"ticks": 0, "notes": 0}
    with Peer(args.id, None, settings, PeerOptions(heartbeat_ms=500, dead_after_ms=5000,
                                                   direct_timeout_ms=2000)) as peer:
        done = threading.Event()
        threading.Thread(target=_status_loop, args=(args.every, lambda: dict(counts), done),
                         daemon=True).start()
        emit({"t": "ready", "incarnation": peer.incarnation})

        def stdin_stop() -> None:
            _wait_stop()
            stop.set()

        threading.Thread(target=stdin_stop, daemon=True).start()
        period = 1.0 / args.rate
        next_at = time.monotonic()
        pending: deque[tuple[Delivery, int]] = deque()

        def confirmed(block: bool) -> None:
            """Write the ids of the sends Kafka confirmed, in send order."""
            while pending and (block or pending[0][0].done()):
                delivery, k = pending.popleft()
                delivery.wait(60)
                if delivery.done() and delivery.exception() is None:
                    sent_file.write(f"{delivery.message_id}\ttick\t{k}\n")
                else:
                    counts["failed"] = counts.get("failed", 0) + 1

        while not stop.is_set():
            n = counts["ticks"]
            if args.window:
                pending.append((peer.send_nowait(args.to, Tick(n)), n))
                if len(pending) >= args.window:
                    pending[0][0].wait(60)
                confirmed(False)
            else:
                mid = peer.send(args.to, Tick(n))
                sent_file.write(f"{mid}\ttick\t{n}\n")
            counts["ticks"] += 1
            if args.publish_every and n % args.publish_every == 0:
                k = counts["notes"]
                mid = peer.publish(Note(k))
                sent_file.write(f"{mid}\tnote\t{k}\n")
                counts["notes"] += 1
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                stop.wait(delay)
            elif delay < -1.0:
                next_at = time.monotonic()  # fell behind: do not burst to catch up
        done.set()
        peer.flush(60)
        confirmed(True)
        sent_file.flush()
    sent_file.close()
    emit({"t": "final", **counts})
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the role and run it."""
    parser = argparse.ArgumentParser(prog="python -m tidemark.demo.peer_proc")
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between status lines")
    roles = parser.add_subparsers(dest="role", required=True)
    r = roles.add_parser("receiver")
    r.add_argument("--id", required=True)
    r.add_argument("--ledger", required=True)
    r.add_argument("--dedup-dir", default=None,
                   help="folder of the persisted dedup store (default: TIDEMARK_PEER_DEDUP_DIR)")
    r.add_argument("--handler-ms", type=float, default=0.0,
                   help="each handler call sleeps this long before recording the message")
    r.add_argument("--no-fsync", action="store_true",
                   help="write ledger lines without fsync (they survive a SIGKILL of this"
                        " process, not a machine crash)")
    r.add_argument("--keep-repeats", action="store_true",
                   help="write a ledger line for every handler call, a repeated id included")
    r.set_defaults(func=run_receiver)
    s = roles.add_parser("sender")
    s.add_argument("--id", required=True)
    s.add_argument("--to", required=True)
    s.add_argument("--rate", type=float, default=150.0)
    s.add_argument("--publish-every", type=int, default=10)
    s.add_argument("--sent", required=True)
    s.add_argument("--window", type=int, default=0,
                   help="sends in flight at most (0: each send waits for Kafka's ack)")
    s.set_defaults(func=run_sender)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
