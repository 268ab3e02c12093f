"""The one process supervisor: start a child with its log file (:class:`Child`), wait for
it to be ready, stop it (SIGTERM with a grace period, or SIGKILL) and reap it; and the same
by pid for the local stack's detached processes, which outlive the command that started
them. Always by pid or process group, never by name."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["Child", "free_ports", "start_detached", "is_alive", "terminate", "kill9",
           "wait_port", "wait_file"]


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


class Child:
    """``argv`` as a child process whose output goes to ``log_file`` (appended).

    ``talk``: stdin and stdout are text pipes to this process (:meth:`send`,
    :meth:`readline`) and only stderr goes to the log; otherwise both go to the log and
    stdin is empty. ``own_group``: the child leads a new session and process group, and
    :meth:`kill` and :meth:`stop` signal the whole group (a JVM and workers it started)."""

    def __init__(self, argv: Sequence[str], log_file: Path, *,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 talk: bool = False, own_group: bool = False) -> None:
        self.log_file = log_file
        self.own_group = own_group
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("ab") as out:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE if talk else subprocess.DEVNULL,
                stdout=subprocess.PIPE if talk else out,
                stderr=out if talk else subprocess.STDOUT, text=talk,
                start_new_session=own_group, env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd else None)

    @property
    def pid(self) -> int:
        """The child's pid (with ``own_group``, also its process group id)."""
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """Whether the child still runs."""
        return self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code once the child was reaped, else None."""
        return self.proc.returncode

    def send(self, line: str) -> None:
        """Write ``line`` and a newline to the child's stdin (``talk``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def readline(self) -> str:
        """The next line the child writes on stdout (``talk``); "" once it closed it."""
        assert self.proc.stdout is not None
        return str(self.proc.stdout.readline())

    def wait(self, timeout: float) -> int:
        """Wait for the exit and reap; :class:`subprocess.TimeoutExpired` at the deadline."""
        return self.proc.wait(timeout)

    def _signal(self, sig: signal.Signals) -> None:
        try:
            if self.own_group:
                os.killpg(self.proc.pid, sig)
            elif self.alive:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def kill(self, wait_s: float = 30.0) -> None:
        """SIGKILL (no cleanup of any kind in the child) and reap."""
        self._signal(signal.SIGKILL)
        self.proc.wait(wait_s)

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; with ``own_group`` what is left of the
        group (helpers that outlive the leader) is SIGKILLed too. Returns the exit code."""
        if self.alive:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.own_group:
            self._signal(signal.SIGKILL)
        return self.proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log ("" when there is none), for failure
        messages."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def start_detached(argv: Sequence[str], log_file: Path, env: Mapping[str, str] | None = None,
                   cwd: Path | None = None) -> int:
    """Start ``argv`` in its own session, output appended to ``log_file``; returns the pid
    (the stack records it and acts on it later by pid: :func:`is_alive` reaps it)."""
    return Child(argv, log_file, env=env, cwd=cwd, own_group=True).pid


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


def wait_port(port: int, deadline: float, pid: int | None = None,
              host: str = "127.0.0.1") -> bool:
    """Wait until host:port accepts a connection; False on timeout or if ``pid`` died."""
    def accepts() -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex((host, port)) == 0
    return _wait_for(accepts, deadline, pid)
