"""Demo peer processes: start one, read its JSON status lines, stop it or SIGKILL it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemark.demo.ledger import read_handled
from tidemark.exceptions import StackError
from tidemark.stack.processes import Child

__all__ = ["PeerProcess", "start_senders", "wait_handled"]

ROOT = Path(__file__).resolve().parents[2]


class PeerProcess:
    """A ``python -m tidemark.demo.peer_proc`` child; its last status line is kept."""

    def __init__(self, name: str, argv: list[str], folder: Path,
                 state_dir: str | None = None, env: dict[str, str | None] | None = None,
                 on_line: Callable[[dict[str, Any]], None] | None = None) -> None:
        """``env``: variables to set (None: to remove) for the child; ``on_line``: called
        with every JSON line the child writes, in the reader thread."""
        self.name = name
        base = [sys.executable, "-m", "tidemark.demo.peer_proc"]
        if state_dir:
            base += ["--state-dir", state_dir]
        # a peer signs in to Kafka as the stack's peer user (`local up --sasl`)
        child_env = {"TIDEMARK_STACK_ROLE": "peer", **os.environ, "PYTHONUNBUFFERED": "1"}
        for k, v in (env or {}).items():
            if v is None:
                child_env.pop(k, None)
            else:
                child_env[k] = v
        self.on_line = on_line
        self.spawned_at = time.time()  # wall clock, comparable with the lines' ``ts``
        self.child = Child(base + argv, folder / f"{name}.err", env=child_env, cwd=ROOT,
                           talk=True)
        self.last: dict[str, Any] = {}
        self.first: dict[str, dict[str, Any]] = {}  #: the first line of each kind (``t``)
        self.final: dict[str, Any] | None = None
        self.ready = threading.Event()
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"{name}-out")
        self._reader.start()

    @property
    def pid(self) -> int:
        """The child's pid."""
        return self.child.pid

    def _read(self) -> None:
        for line in iter(self.child.readline, ""):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if not isinstance(doc, dict):
                continue
            if self.on_line is not None:
                self.on_line(doc)
            with self._changed:
                self.first.setdefault(str(doc.get("t")), doc)
                self.last = doc
                if doc.get("t") == "ready":
                    self.ready.set()
                if doc.get("t") == "final":
                    self.final = doc
                self._changed.notify_all()

    def alive(self) -> bool:
        """Whether the child still runs."""
        return self.child.alive

    def wait_until(self, cond: Callable[[dict[str, Any]], bool], timeout: float,
                   what: str) -> dict[str, Any]:
        """Block until ``cond(last status)`` holds; raises with the child's stderr tail."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not cond(self.last):
                left = deadline - time.monotonic()
                if left <= 0 or (not self.alive() and not self._reader.is_alive()):
                    raise StackError(f"{self.name}: {what} not reached in {timeout:.0f}s"
                                     f" (exit {self.child.returncode}): {self.stderr_tail()}")
                self._changed.wait(min(left, 0.5))
            return dict(self.last)

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Block until the peer started (for a receiver: replayed and handed over)."""
        return self.wait_until(lambda d: self.ready.is_set(), timeout, "ready")

    def stop(self, timeout: float = 90.0) -> dict[str, Any]:
        """Ask the peer to stop cleanly; returns its final status line."""
        if self.alive():
            try:
                self.child.send("stop")
            except BrokenPipeError:
                pass
        try:
            self.child.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise StackError(f"{self.name} did not stop within {timeout:.0f}s") from None
        self._reader.join(5)
        if self.final is None:
            raise StackError(f"{self.name} exited {self.child.returncode} without a final"
                             f" status: {self.stderr_tail()}")
        return self.final

    def kill(self) -> None:
        """SIGKILL (no cleanup of any kind in the child) and reap."""
        self.child.kill()
        self._reader.join(5)

    def stderr_tail(self, lines: int = 15) -> str:
        """The last lines the child wrote on stderr."""
        return self.child.log_tail(lines)


def start_senders(argv: dict[str, list[str]], folder: Path, state_dir: str | None,
                  started: list[PeerProcess]) -> list[PeerProcess]:
    """A sender process per name (``argv[name]``: its arguments after ``sender``; the ids it
    sent go to ``<folder>/<name>.sent``), each added to ``started`` as it starts (the
    caller stops them); returns them once every one is ready."""
    senders = []
    for name, args in argv.items():
        sender = PeerProcess(name, ["sender", *args, "--sent", str(folder / f"{name}.sent")],
                             folder, state_dir)
        started.append(sender)
        senders.append(sender)
    for sender in senders:
        sender.wait_ready(120)
    return senders


def wait_handled(receiver: PeerProcess, ledger: Path, want: set[str], timeout: float,
                 say: Callable[[str], None]) -> None:
    """Poll ``receiver``'s ledger (every second, saying how far it is) until it handled
    every id in ``want``; returns at ``timeout`` seconds or once the receiver exited."""
    deadline = time.monotonic() + timeout
    while True:
        have = {h.message_id for h in read_handled(ledger)}
        if want <= have or time.monotonic() > deadline or not receiver.alive():
            return
        say(f"  B handled {len(want & have):,} of {len(want):,}")
        time.sleep(1.0)  # polling the ledger file, bounded by the deadline above
