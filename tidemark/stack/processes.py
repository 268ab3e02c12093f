"""Processes of the local stack: start detached, check, stop by pid (never by name)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["free_ports", "start_detached", "is_alive", "terminate", "kill9", "wait_port",
           "wait_file"]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together, then released)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_detached(argv: Sequence[str], log_file: Path, env: Mapping[str, str] | None = None,
                   cwd: Path | None = None) -> int:
    """Start ``argv`` in its own session, output appended to ``log_file``; returns the pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env=dict(env) if env is not None else None,
                                cwd=str(cwd) if cwd else None)
    return proc.pid


def is_alive(pid: int | None, marker: str | None = None) -> bool:
    """True if ``pid`` runs and (when given) its command line contains ``marker``.

    The marker guards against pid reuse: a recycled pid belongs to someone else.
    """
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                _reap(pid)
                return False
        if marker is not None:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            return marker.encode() in cmdline
        return True
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except PermissionError:
        return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def kill9(pid: int, wait_s: float = 15.0) -> None:
    """SIGKILL the process group of ``pid`` (our processes lead their own group), and wait
    until it is gone: a restart must not race the dying process for its files and locks."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
            break
        except (ProcessLookupError, PermissionError):
            continue
    deadline = time.monotonic() + wait_s
    while is_alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.02)


def terminate(pids: Sequence[int], marker: str | None, grace_s: float = 20.0) -> None:
    """SIGTERM each live pid, wait up to ``grace_s``, then SIGKILL what is left."""
    live = [p for p in pids if is_alive(p, marker)]
    for pid in live:
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(is_alive(p, marker) for p in live):
        time.sleep(0.1)
    for pid in live:
        if is_alive(pid, marker):
            kill9(pid)


def _wait_for(ready: Callable[[], bool], deadline: float, pid: int | None) -> bool:
    """Poll ``ready`` until it holds (True) or the deadline passes; if ``pid`` dies first,
    one last check decides."""
    while time.monotonic() < deadline:
        if ready():
            return True
        if pid is not None and not is_alive(pid):
            return ready()
        time.sleep(0.2)
    return ready()


def wait_file(path: Path, deadline: float, pid: int | None = None) -> bool:
    """Wait until ``path`` exists; False on timeout or if ``pid`` died first."""
    return _wait_for(path.exists, deadline, pid)


def wait_port(port: int, deadline: float, pid: int | None = None) -> bool:
    """Wait until 127.0.0.1:port accepts a connection; False on timeout or if ``pid`` died."""
    def accepts() -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", port)) == 0
    return _wait_for(accepts, deadline, pid)
