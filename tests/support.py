"""Helpers for tests: waiting on a condition with a deadline (never a bare sleep), a peer run
as a separate process (for the fault tests that SIGKILL it: :class:`PeerScript`, and the
script's side, :func:`serve_peer` and :class:`HandlerRecord`, read by :class:`HandlerLog`), background traffic, and the
queues txlog says there must be (:func:`expected_queues`)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tidemark.gossip.record_signing import IssuerSigners, SignatureVerifier, issuer_signers
from tidemark.gossip.txlog_admission import TxlogAdmission
from tidemark.log.consumer import read_to_end
from tidemark.log.exceptions import CodecError
from tidemark.log.load import LoadResult
from tidemark.log.load import generate_load as _generate_load
from tidemark.log.offsets import end_offsets, watermarks
from tidemark.log.queue_fold import QueueFold, events_of
from tidemark.log.queue_state import DEFAULT_DELIVERY_LIMIT, MAX_ID_BYTES, Ttl
from tidemark.log.settings import Settings
from tidemark.log.wire import default_codec
from tidemark.peer_client import message
from tidemark.stack.processes import Child

__all__ = ["wait_for", "Job", "PeerScript", "serve_peer", "HandlerRecord", "HandlerLog",
           "post", "restart_recipient", "acked_by", "ROOT", "expected_queues",
           "BackgroundLoad", "tidemark_cli", "converge", "operator_purge", "wait_purge_applied"]

#: The repository root (peer scripts run there, so that they import the checkout).
ROOT = Path(__file__).resolve().parents[1]


def wait_for(condition: Callable[[], object], timeout: float = 60.0, interval: float = 0.2,
             what: str = "condition") -> object:
    """Poll ``condition`` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@message("tests.Job")
@dataclass
class Job:
    """The message of the peer scripts' handlers: its number ``n``."""

    n: int


@message("tests.Blob")
@dataclass
class Blob:
    """A numbered message with a payload of its own size (``data``)."""

    n: int
    data: bytes


class PeerScript:
    """A peer run as a separate process (``python -c script state_dir peer_id *args``) that
    the test drives over stdin/stdout: ``ready <incarnation>``, ``status`` (one JSON line),
    ``stop`` (answers ``stopped``), or a SIGKILL (the script's side: :func:`serve_peer`).
    When the stack's cluster file has a secret, the process gets its own replay token (it
    never holds the secret)."""

    def __init__(self, stack: Any, peer_id: str, script: str, args: list[str],
                 tmp: Path, host: Any = None) -> None:
        """``host``: a :class:`~tidemark.stack.hosts.Host` to run on (its direct server
        binds the host's address), None: this machine."""
        from tidemark.gossip.peer_auth import issue_token
        from tidemark.replica.config import load_cluster_file
        from tidemark.stack.replicas import CONFIG_NAME

        env = dict(os.environ)
        secret = load_cluster_file(stack.state_dir / CONFIG_NAME).secret
        if secret:
            env["TIDEMARK_PEER_TOKEN"] = issue_token(secret, stack.settings().environment,
                                                     peer_id)
        argv = [sys.executable, "-c", script, str(stack.state_dir), peer_id, *args]
        if host is not None:
            argv = host.argv(argv)
            env["TIDEMARK_PEER_BIND"] = f"{host.address}:0"
        self.child = Child(argv,
                           tmp / f"{peer_id}-{os.getpid()}-{id(self)}.err", env=env, cwd=ROOT,
                           talk=True)
        self._lines: queue.Queue[str] | None = None

    def command(self, cmd: str) -> None:
        self.child.send(cmd)

    def line(self, timeout_s: float = 600.0) -> str:
        """The next line the process writes (fails after ``timeout_s`` or at its exit)."""
        if self._lines is None:
            self._lines = queue.Queue()
            threading.Thread(target=self._read, args=(self._lines,), daemon=True).start()
        try:
            out = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            # name where it is stuck: the peer's own status, if it still answers
            status = "no answer to status"
            try:
                self.command("status")
                status = self._lines.get(timeout=15).strip()
            except (queue.Empty, OSError):
                pass
            raise AssertionError(f"no line from the peer process in {timeout_s:g} s;"
                                 f" its status: {status}; {self.child.log_tail(40)}") from None
        assert out, f"peer process exited: {self.child.log_tail(40)}"
        return out.strip()

    def _read(self, lines: "queue.Queue[str]") -> None:
        while True:
            out = self.child.readline()
            lines.put(out)
            if not out:
                return

    def ready(self) -> str:
        """Waits for the end of the start sequence; returns the incarnation."""
        out = self.line()
        assert out.startswith("ready"), out
        return out.split()[1]

    def status(self) -> dict[str, Any]:
        self.command("status")
        doc = dict(json.loads(self.line()))
        assert "status_error" not in doc, f"Peer.status() raised: {doc['status_error']}"
        return doc

    def stop(self) -> None:
        self.command("stop")
        assert self.line() == "stopped"
        self.child.wait(30)

    def sigkill(self) -> None:
        """SIGKILL (when it still runs) and reap."""
        self.child.kill()


def serve_peer(peer: Any, actions: Mapping[str, Callable[[], object]] | None = None,
               on_start_error: Callable[[], object] | None = None) -> None:
    """The script's side of :class:`PeerScript`: answer ``status`` and ``stop`` (and the
    commands in ``actions``) read on stdin in a thread, start ``peer``, print ``ready
    INCARNATION`` and wait for ``stop`` or the SIGKILL. If ``start()`` raises,
    ``on_start_error`` runs (without it, the error ends the script)."""
    def commands() -> None:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "status":
                try:
                    print(json.dumps(peer.status()), flush=True)
                except Exception as exc:  # the test reads the failure, not the next line
                    print(json.dumps({"status_error": repr(exc)}), flush=True)
            elif cmd == "stop":
                break
            elif actions and cmd in actions:
                actions[cmd]()
        peer.stop()
        print("stopped", flush=True)
        os._exit(0)

    threading.Thread(target=commands, daemon=True).start()
    try:
        peer.start()
    except Exception:
        if on_start_error is None:
            raise
        on_start_error()
    print("ready", peer.incarnation, flush=True)
    threading.Event().wait()


class HandlerRecord:
    """The script's side of :func:`handled`: a line ``kind incarnation message_id n`` per
    event, appended in one write (and fsync'ed, unless ``fsync`` is off) before the handler
    returns, so that a SIGKILL of the process keeps it."""

    def __init__(self, path: str, fsync: bool = True) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync = fsync
        self._lock = threading.Lock()

    def write(self, kind: str, incarnation: str, message_id: str, n: int) -> None:
        line = f"{kind} {incarnation} {message_id} {n}\n".encode()
        with self._lock:
            os.write(self._fd, line)
            if self._fsync:
                os.fsync(self._fd)


def tidemark_cli(settings: Settings, *args: str, timeout: float = 120.0) -> str:
    """``tidemark *args`` on ``settings``' cluster and topics in a subprocess; its stdout
    (the test fails on a non-zero exit, with the stderr)."""
    out = subprocess.run([sys.executable, "-m", "tidemark", *args, "--bootstrap",
                          settings.bootstrap, "--topic-prefix", settings.topic_prefix],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout


def converge(job: Any, timeout: float = 240.0) -> dict[int, int]:
    """Wait until the queues job's progress covers txlog's end; the test fails (with the
    job's log) if it exits or the timeout passes. Returns the progress."""
    from tidemark.spark_streaming.exceptions import QueuesError
    try:
        return dict(job.wait_for_progress(timeout))
    except QueuesError as exc:
        pytest.fail(str(exc))


class HandlerLog:
    """The test's side of a peer script's :class:`HandlerRecord` in the file ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self) -> list[tuple[str, str, str, int]]:
        """``(kind, incarnation, message id, n)`` per line, in the order written."""
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            kind, inc, mid, n = line.split()
            rows.append((kind, inc, mid, int(n)))
        return rows

    def done_ids(self) -> list[str]:
        """The message ids of the ``done`` lines, in order."""
        return [mid for kind, _, mid, _ in self.rows() if kind == "done"]

    def blocked(self) -> bool:
        """Whether a handler wrote ``blocked``."""
        return any(kind == "blocked" for kind, *_ in self.rows())

    def exactly_once(self, sent: list[str]) -> None:
        """Each id in ``sent`` is in a ``done`` line once, and no other id is."""
        counts = Counter(self.done_ids())
        lost = [m for m in sent if counts[m] == 0]
        twice = [m for m, c in counts.items() if c > 1]
        assert not lost and not twice and set(counts) == set(sent), (
            f"{len(sent)} sent, {len(counts)} handled: lost {lost[:5]} ({len(lost)}),"
            f" twice {twice[:5]} ({len(twice)}), unknown {len(set(counts) - set(sent))}")


def post(sender: Any, to: str, ns: range) -> list[str]:
    """``sender`` posts a :class:`Job` to ``to`` for each n and flushes; the message ids."""
    ids = [sender.post(to, Job(n)) for n in ns]
    assert sender.flush(120)
    return ids


def restart_recipient(sender: Any, to: str, record: HandlerLog, sent: list[str],
                      start: Callable[[], PeerScript], down: range, live: range,
                      ) -> tuple[str, dict[str, Any]]:
    """The recipient ``to`` comes back: ``sender`` posts ``down`` while it is down,
    ``start()`` runs it again and ``sender`` posts ``live`` to it (the ids are added to
    ``sent``); once every id in ``sent`` is handled, it is stopped. Returns its incarnation
    and its last status."""
    sent += post(sender, to, down)
    peer = start()
    incarnation = peer.ready()
    sent += post(sender, to, live)
    wait_for(lambda: set(record.done_ids()) >= set(sent), 480, 0.2,
             f"every message handled after {to}'s restart")
    status = peer.status()
    peer.stop()
    return incarnation, status


def acked_by(settings: Settings, peer_id: str, end: int | None = None) -> set[str]:
    """Message ids of the Acks ``peer_id`` appended to txlog (below offset ``end`` of its
    partition, when given)."""
    from tidemark.log.partitioner import partition_for_peer
    from tidemark.peer_client.records import peer_codec
    codec, out = peer_codec(), set()
    k = partition_for_peer(peer_id, settings.partitions)
    for batch in read_to_end(settings, "txlog", [k]):
        for m in batch:
            if (end is not None and m.offset() >= end) or m.key() != peer_id.encode():
                continue
            dec = codec.decode(m.value())
            if dec.name in ("Ack", "AckBatch") and dec.record["peer"] == peer_id:
                out.update(dec.record.get("message_ids") or [dec.record.get("message_id")])
    return out


def ack_records(settings: Settings, peer_id: str) -> tuple[list[dict[str, Any]],
                                                              dict[str, int]]:
    """The AckBatch records ``peer_id`` appended to its txlog partition, and the offset of
    each Send to it there, by message id."""
    from tidemark.log.partitioner import partition_for_peer
    from tidemark.peer_client.records import peer_codec
    codec, batches, sends = peer_codec(), [], {}
    k = partition_for_peer(peer_id, settings.partitions)
    for batch in read_to_end(settings, "txlog", [k]):
        for m in batch:
            if m.key() != peer_id.encode():
                continue
            dec = codec.decode(m.value())
            if dec.name == "AckBatch" and dec.record["peer"] == peer_id:
                batches.append(dec.record)
            elif dec.name == "Send":
                sends[dec.record["message_id"]] = m.offset()
    return batches, sends


_SIGNERS: dict[str, IssuerSigners | None] = {}


def signers() -> IssuerSigners | None:
    """Signers of any identity from the session's CA (``TIDEMARK_TLS_ISSUER``); None when
    the tests run insecure."""
    key = os.environ.get("TIDEMARK_TLS_ISSUER", "") + os.environ.get("TIDEMARK_INSECURE", "")
    if key not in _SIGNERS:
        _SIGNERS[key] = issuer_signers()
    return _SIGNERS[key]


def generate_load(settings: Settings, **kw: Any) -> LoadResult:
    """:func:`tidemark.log.load.generate_load` with its acks signed as each recipient (what
    peers write; the queues job and the replicas refuse unsigned acks in secure mode)."""
    found = signers()
    if found is not None and "sealers" not in kw:
        kw["sealers"] = lambda peer: found.peer(settings.environment, peer).sealer
    return _generate_load(settings, **kw)


def sealed(settings: Settings, name: str, record: dict[str, Any], *,
           operator: str | None = None) -> bytes:
    """``record`` of txlog type ``name`` encoded and signed: by ``operator`` if given, else
    by the record's peer (unsigned when the tests run insecure)."""
    value = default_codec().encode(name, {**record, "signer": b"", "signature": b""})
    found = signers()
    if found is None:
        return value
    signer = (found.operator(operator) if operator is not None
              else found.peer(record.get("environment", settings.environment), record["peer"]))
    return signer.seal(value)


def operator_purge(settings: Settings, peer: str, *, environment: str | None = None,
                   operator: str | None = "tests", partition: int | None = None) -> int:
    """An operator's Purge of ``peer`` as ``tidemark peer purge`` appends it: to ``purges``,
    reaching txlog's end in the peer's partition now (what was appended before must have
    been flushed); returns that offset. ``operator`` None: signed by the peer itself (a
    forgery); ``partition``: the txlog partition it claims (a forgery, when not the peer's)."""
    from tidemark.log.partitioner import partition_for_peer
    from tidemark.log.producer import LogProducer
    part = partition_for_peer(peer, settings.partitions)
    below = end_offsets(settings, "txlog", [part])[part]
    producer = LogProducer(settings)
    producer.produce_raw(settings.topic("purges"), peer, sealed(settings, "Purge", {
        "peer": peer, "environment": environment or settings.environment,
        "timestamp_ms": int(time.time() * 1000),
        "txlog_partition": part if partition is None else partition, "below_offset": below},
        operator=operator))
    producer.flush(30)
    return below


def wait_purge_applied(settings: Settings, peer: str, below: int,
                       timeout: float = 240.0) -> None:
    """Wait until the queues job has applied ``peer``'s Purge reaching ``below``: the copy it
    keeps in ``queues`` (written after the peer's tombstones, in the same partition). A
    Purge moves no txlog progress, so waiting on the job's progress does not cover it."""
    from tidemark.log.partitioner import partition_for_peer
    from tidemark.log.queue_state import purge_key
    key, part = purge_key(peer).encode(), partition_for_peer(peer, settings.partitions)
    codec = default_codec()

    def applied() -> bool:
        return any(m.key() == key and m.value() and
                   codec.decode(m.value()).record["below_offset"] >= below
                   for msgs in read_to_end(settings, "queues", [part]) for m in msgs)
    wait_for(applied, timeout, 0.5, f"the queues job applying the Purge of {peer}")


class BackgroundLoad:
    """Rounds of :func:`~tidemark.log.load.generate_load` (half of each round's Sends acked)
    in a thread, ``pause_s`` apart, until :meth:`stop`: traffic that keeps flowing across a
    kill. ``totals`` counts what was sent and acked; an error in the thread is kept in
    ``errors`` for the test to report."""

    def __init__(self, settings: Settings, peers: int, messages: int, pause_s: float) -> None:
        self.settings, self.peers, self.messages, self.pause_s = settings, peers, messages, pause_s
        self.totals = {"sent": 0, "acked": 0, "rounds": 0}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "BackgroundLoad":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                result = generate_load(self.settings, peers=self.peers, messages=self.messages,
                                       ack_ratio=0.5, seed=self.totals["rounds"])
                self.totals["sent"] += result.sent
                self.totals["acked"] += result.acked
                self.totals["rounds"] += 1
                self._stop.wait(self.pause_s)
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)

    @property
    def running(self) -> bool:
        """Still producing, without an error."""
        return self._thread.is_alive() and not self.errors

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop after the current round; True if it ended without an error."""
        self._stop.set()
        self._thread.join(timeout)
        return not self._thread.is_alive() and not self.errors


_KINDS = ("Send", "Ack", "AckBatch", "DeliveryFailed")  # what the job applies from txlog


def job_admission(settings: Settings) -> TxlogAdmission:
    """What the tests' queues job applies: ``settings``' environment and, unless the tests
    run insecure, signatures checked against the session's CA."""
    issuer = os.environ.get("TIDEMARK_TLS_ISSUER")
    verifier = None
    if issuer and not os.environ.get("TIDEMARK_INSECURE"):
        verifier = SignatureVerifier.from_files(Path(issuer) / "trust.pem",
                                                Path(issuer) / "crl.pem")
    return TxlogAdmission(settings.environment, verifier)


def expected_queues(settings: Settings, timeout_s: float = 120.0,
                    delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
                    ) -> tuple[dict[str, set[str]], dict[int, int], int]:
    """``(unacked ids per peer, txlog end offsets, undecodable records)``: txlog read with a
    plain consumer and folded, in txlog order, by the queue model
    (:class:`~tidemark.log.queue_fold.QueueFold`, the job's own decisions), so it is
    independent of the job's batching, state store and output path. A record the job would
    dead-letter as poison (undecodable, another peer's, an id too long) is counted apart."""
    marks = watermarks(settings, "txlog")
    fold = QueueFold(Ttl(delivery_limit=delivery_limit))
    codec, bad = default_codec(), 0
    admission = job_admission(settings)
    pending: dict[str, list[Any]] = {}
    for msg in (m for msgs in read_to_end(settings, "txlog", timeout_s=timeout_s, marks=marks)
                for m in msgs):
        try:
            peer = (msg.key() or b"").decode()
            decoded = codec.decode(msg.value())
        except (CodecError, UnicodeDecodeError):
            bad += 1
            continue
        rec = decoded.record
        owner = rec.get("recipient", rec.get("peer"))
        if not peer or owner != peer or decoded.name not in _KINDS or "\x00" in peer \
                or max(len(peer.encode()), len(rec.get("message_id", "").encode())) \
                > MAX_ID_BYTES:
            bad += 1
            continue
        if admission.check(decoded.name, rec, msg.value()) is not None:
            continue  # refused (another environment, not signed by who may): not applied
        pending.setdefault(peer, []).extend(events_of(decoded.name, rec, msg.offset()))
    for msg in (m for msgs in read_to_end(settings, "purges", timeout_s=timeout_s)
                for m in msgs):  # the operator's Purges, each at the txlog offset it reaches
        try:
            peer, decoded = (msg.key() or b"").decode(), codec.decode(msg.value())
        except (CodecError, UnicodeDecodeError):
            continue
        rec = decoded.record
        if decoded.name != "Purge" or rec["peer"] != peer or rec["below_offset"] < 0 or \
                rec["txlog_partition"] != msg.partition() or \
                admission.check(decoded.name, rec, msg.value()) is not None:
            continue
        pending.setdefault(peer, []).extend(events_of("Purge", rec, msg.offset()))
    for peer, events in pending.items():  # one batch per peer: the model's result does not
        events.sort(key=lambda e: (e.offset, e.kind != "Purge"))  # depend on batch bounds
        fold.apply(peer, events)             # (test_queue_state.py)
    queues = {p: {send.message_id for send, _ in fold.queue(p)} for p in fold.peers}
    ends = {p: hi for p, (_, hi) in marks.items()}
    return {p: q for p, q in queues.items() if q}, ends, bad
