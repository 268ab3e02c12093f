"""``tidemark bench replay``: a peer's backlog replayed end to end into a real Peer's handler,
beside a raw confluent-kafka consumer reading the same queue records, with the serving
replica node's RSS sampled during the replay.

Filling the backlog (``fill``):

* ``direct`` (default, the fastest honest way): the bench appends ``messages`` Sends to the
  peer's txlog partition and writes the matching queue records itself, in exactly the
  format of the queues job's sink (QueueEntry upserts keyed ``peer\\0message_id``, then a
  QueueProgress covering txlog). The replica nodes ingest both as they would the job's
  output. The queues job is not measured here (``bench queues`` does that); run this on a
  stack without it (or with ``--fill spark``).
* ``spark``: the bench appends only the Sends; the running queues job builds the queue,
  and the replay's barrier waits for it.

Once filled, the bench waits (``settle_s``, at most) until the machine is quiet: the
replica nodes have ingested the backlog and compacted it (:func:`settle`). The raw consumer
reads the queue records then, on the quiet machine; the bench waits for quiet again and
replays. (Read after the replay, as before, the raw consumer shared the machine with the
replicas' GC releasing the million replayed messages: 0.3-1.0M records/s from one run to the
next, which made the ratio a measure of that GC's progress.) The peer's rate runs from the
first replayed message its handler saw to the last; the raw rate from the first record the
raw consumer got to the last of the same queue entries. ``handler`` picks the peer's
handler: ``batch`` (``Peer.batch_handler``, the default) or ``single`` (``Peer.handler``).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tidemark.bench.security import compare_throughput, round_modes, skipped
from tidemark.gossip.replay import DEFAULT_BATCH, DEFAULT_WINDOW
from tidemark.log.exceptions import TidemarkError
from tidemark.log.offsets import end_offsets, watermarks
from tidemark.log.partitioner import partition_for_peer
from tidemark.log.producer import LogProducer
from tidemark.log.settings import Settings
from tidemark.peer_client import (
    BatchContext,
    MessageContext,
    Peer,
    PeerOptions,
    message,
    message_type_of,
)
from tidemark.stack.cpu_account import CpuAccount, stack_pids

__all__ = ["bench_replay", "BenchItem", "TARGET_RATE", "TARGET_RATIO",
           "TARGET_USER_LOOP_RATIO", "TARGET_MACHINE_US", "HANDLERS", "RssSampler",
           "raw_consumer", "raw_read", "user_loop_read", "ack_rounds", "ack_modes",
           "compare_acks"]

TARGET_RATE = 100_000
#: Tidemark's replay against the raw consumer (the limit) ...
TARGET_RATIO = 0.4
#: ... against the user's own loop (the peer to beat) ...
TARGET_USER_LOOP_RATIO = 2.0
#: ... and the machine's CPU per replayed message, every process together (microseconds)
TARGET_MACHINE_US = 8.0
#: ``--handler``: the replayed messages go to a ``Peer.batch_handler`` or a ``Peer.handler``
HANDLERS = ("batch", "single")
Say = Callable[[str], None]


@message("bench.ReplayItem")
@dataclass
class BenchItem:
    """The replayed message: a fixed-size payload."""

    data: bytes


def _proc_mib(pid: int, key: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


class RssSampler:
    """Samples VmRSS of some pids every ``period`` seconds in a thread."""

    def __init__(self, pids: dict[str, int], period: float = 0.2) -> None:
        self.pids, self.period = pids, period
        self.before = {n: _proc_mib(p, "VmRSS") for n, p in pids.items()}
        self.peak: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss")

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.samples += 1
            for n, p in self.pids.items():
                v = _proc_mib(p, "VmRSS")
                if v is not None and v > self.peak.get(n, 0.0):
                    self.peak[n] = v

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def report(self, node: str) -> dict[str, Any]:
        """Before, peak during and after (VmRSS), and VmHWM (the process's lifetime peak)."""
        pid = self.pids.get(node)
        if pid is None:
            return {"node": node, "sampled": False}
        return {"node": node, "pid": pid, "sampled": True, "samples": self.samples,
                "rss_before_mib": _round(self.before.get(node)),
                "rss_peak_mib": _round(self.peak.get(node)),
                "rss_after_mib": _round(_proc_mib(pid, "VmRSS")),
                "hwm_mib": _round(_proc_mib(pid, "VmHWM"))}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def fill(settings: Settings, peer: str, k: int, n: int, payload: bytes, direct: bool,
         say: Say) -> tuple[int, int]:
    """Append ``n`` Sends to ``peer`` (txlog partition ``k``) and, if ``direct``, their queue
    records; returns the queues offset where the peer's entries start and the txlog end."""
    from tidemark.log.queue_state import queue_key
    producer = LogProducer(settings)
    q0 = end_offsets(settings, "queues", [k])[k]
    start = end_offsets(settings, "txlog", [k])[k]
    env, mtype = settings.environment, message_type_of(BenchItem).name
    now = int(time.time() * 1000)
    send = {"sender": "bench-sender", "recipient": peer, "environment": env,
            "message_type": mtype, "payload": payload, "timestamp_ms": now,
            "delivery_count": 0}
    ids = [f"{peer}-{i}" for i in range(n)]
    for i, mid in enumerate(ids):
        producer.produce("txlog", peer, "Send", {**send, "message_id": mid}, partition=k)
        if i % 100_000 == 99_999:
            say(f"fill: {i + 1:,} Sends appended")
    producer.flush(300)
    end = end_offsets(settings, "txlog", [k])[k]
    if direct:
        if end != start + n:
            raise TidemarkError(f"txlog/{k} moved by {end - start - n} records not written by"
                                f" the bench: --fill direct needs a quiet partition")
        qtopic = producer.topic("queues")
        entry = {"peer": peer, "sender": "bench-sender", "message_type": mtype,
                 "payload": payload, "timestamp_ms": now, "txlog_partition": k,
                 "delivery_count": 0}
        for i, mid in enumerate(ids):
            producer.produce_raw(qtopic, queue_key(peer, mid).encode(), producer.codec.encode(
                "QueueEntry", {**entry, "message_id": mid, "txlog_offset": start + i}),
                partition=k)
            if i % 100_000 == 99_999:
                say(f"fill: {i + 1:,} queue entries written")
        producer.flush(300)
        cover(producer, k, end)
    return q0, end


def cover(producer: LogProducer, k: int, end: int) -> None:
    """A QueueProgress saying the queues cover txlog/``k`` up to ``end``, as the queues job
    writes once it has read that far."""
    from tidemark.log.queue_state import progress_key
    producer.produce("queues", progress_key(k), "QueueProgress", {
        "txlog_partition": k, "next_offset": end, "batch_id": 0,
        "timestamp_ms": int(time.time() * 1000)}, partition=k)
    producer.flush(60)


def raw_consumer(settings: Settings, group: str) -> Consumer:
    """A plain confluent-kafka consumer with large fetches, in a group of its own named
    ``group``-<random>, that commits nothing: the raw baseline of the benches. It signs in
    as the settings' client does (``[kafka.client]``, e.g. a ``--sasl`` stack's user)."""
    return Consumer({**settings.client, "bootstrap.servers": settings.bootstrap,
                     "group.id": f"{group}-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                     "max.partition.fetch.bytes": 10_485_760})


def raw_read(settings: Settings, peer: str, k: int, q0: int, n: int, timeout_s: float,
             say: Say, brokers: dict[str, int] | None = None) -> dict[str, Any]:
    """A plain confluent-kafka consumer reading ``peer``'s ``n`` queue entries from ``q0``:
    the limit (it decodes nothing). ``cpu``: the machine's CPU meanwhile, per entry."""
    return _read_queue(settings, peer, k, q0, n, timeout_s, say, "raw", brokers, user=False)


def user_loop_read(settings: Settings, peer: str, k: int, q0: int, n: int,
                   timeout_s: float, say: Say, brokers: dict[str, int] | None = None
                   ) -> dict[str, Any]:
    """The loop a user writes without Tidemark to catch a backlog up, on the same records:
    a confluent-kafka consumer taking 10,000 at a time, fastavro decoding each queue record,
    its payload decoded into the message type, a no-op handler, an asynchronous commit
    every 5,000. The peer to beat (``user_loop_*`` fields)."""
    return _read_queue(settings, peer, k, q0, n, timeout_s, say, "user_loop", brokers,
                       user=True)


def _noop(item: Any) -> None:
    """The user loop's handler."""


def _read_queue(settings: Settings, peer: str, k: int, q0: int, n: int, timeout_s: float,
                say: Say, name: str, brokers: dict[str, int] | None, user: bool
                ) -> dict[str, Any]:
    import io

    from fastavro import parse_schema, schemaless_reader

    from tidemark.log.wire.codec import HEADER_SIZE
    from tidemark.schemas import load_schema
    schema = parse_schema(load_schema("QueueEntry"))
    decode = message_type_of(BenchItem).serializer.decode
    prefix = (peer + "\0").encode()
    consumer = raw_consumer(settings, f"bench-replay-{name}")
    consumer.assign([TopicPartition(settings.topic("queues"), k, q0)])
    account = CpuAccount({"reader": {"reader": os.getpid()}, "brokers": brokers or {}})
    got, first, deadline, uncommitted = 0, 0.0, time.monotonic() + timeout_s, 0
    try:
        account.start()
        while got < n:
            if time.monotonic() > deadline:
                raise TidemarkError(f"{name} consumer read {got} of {n} entries in"
                                    f" {timeout_s}s")
            for m in consumer.consume(10_000, 1.0):
                if m.error() is not None:
                    continue
                if not first:
                    first = time.perf_counter()
                key, value = m.key(), m.value()
                if key is None or value is None or not key.startswith(prefix):
                    continue
                got += 1
                if user:
                    entry: Any = schemaless_reader(io.BytesIO(value[HEADER_SIZE:]), schema,
                                                   None)
                    _noop(decode(entry["payload"]))
                    uncommitted += 1
                    if uncommitted >= 5000:
                        consumer.commit(asynchronous=True)
                        uncommitted = 0
        seconds = time.perf_counter() - first
        account.stop()
    finally:
        consumer.close()
    say(f"{name.replace('_', ' ')} consumer: {got:,} entries in {seconds:.2f}s")
    cpu = account.report({"reader": account.used("reader"),
                          "brokers": account.used("brokers")}, got)
    return {f"{name}_entries": got, f"{name}_seconds": round(seconds, 3),
            f"{name}_msgs_per_s": int(got / seconds) if seconds > 0 else 0,
            f"{name}_cpu": cpu}


class _Counter:
    def __init__(self) -> None:
        self.n = 0
        self.first = 0.0
        self.last = 0.0
        self.lock = threading.Lock()

    def handle(self, msg: BenchItem, ctx: MessageContext) -> None:
        """The per-message handler (``Peer.handler``)."""
        self._seen(1)

    def handle_batch(self, msgs: list[BenchItem], ctx: BatchContext) -> None:
        """The batch handler (``Peer.batch_handler``)."""
        self._seen(len(msgs))

    def _seen(self, n: int) -> None:
        now = time.perf_counter()
        with self.lock:
            if not self.n:
                self.first = now
            self.n += n
            self.last = now


def peer_replay(settings: Settings, peer: str, n: int, pids: dict[str, int], timeout_s: float,
                say: Say, batch: int = DEFAULT_BATCH, window: int = DEFAULT_WINDOW,
                brokers: dict[str, int] | None = None, handler: str = "batch",
                insecure: bool = False, range_acks: bool = True) -> dict[str, Any]:
    """Start a real Peer with replay on start; its handler counts the replayed messages.
    The CPU each process used meanwhile is accounted (``cpu``): this process (the peer),
    the replica that served the replay, the other replicas, the brokers. ``insecure``: the
    peer is made with ``PeerOptions(insecure=True)`` (nodes serving plaintext);
    ``range_acks=False``: it acks every replayed message by id (the baseline of
    :func:`ack_rounds`)."""
    from tidemark.peer_client.replay import ReplicaReplayer
    counter = _Counter()
    # covered=False: the bench measures the replicas' replay of the whole backlog (its
    # queue records are written before, so nothing would be left for the handover anyway)
    replayer = ReplicaReplayer(settings, barrier_timeout_ms=int(timeout_s * 1000),
                               batch=batch, window=window, covered=False)
    options = PeerOptions(insecure=True) if insecure else PeerOptions()
    p = Peer(peer, None, settings, options.with_(range_acks=range_acks), replayer=replayer)
    if handler == "batch":
        p.batch_handler(BenchItem)(counter.handle_batch)
    else:
        p.handler(BenchItem)(counter.handle)
    done = threading.Event()

    def progress() -> None:
        last = 0
        while not done.wait(2.0):
            now = counter.n
            say(f"replay: {replayer.stage}, handled {now:,} of {n:,}"
                f" ({(now - last) / 2:,.0f} msgs/s)")
            last = now

    threading.Thread(target=progress, daemon=True).start()
    account = CpuAccount({"peer": {"peer": os.getpid()}, "replicas": pids,
                          "brokers": brokers or {}})
    t0 = time.perf_counter()
    try:
        with RssSampler(pids) as rss:
            account.start()
            p.start()
            deadline = time.monotonic() + timeout_s
            while counter.n < n and time.monotonic() < deadline:
                time.sleep(0.05)  # the handlers drain the inbox; bounded by the deadline
            account.stop()
        start_s = time.perf_counter() - t0
        st = replayer.status()
    finally:
        done.set()
        p.stop()
    say(f"replay: {st['stage']}, handled {counter.n:,} of {n:,} in {start_s:.1f}s")
    if counter.n < n:
        raise TidemarkError(f"the peer's handler saw {counter.n} of {n} messages")
    seconds = counter.last - counter.first
    node = (st.get("nodes") or ["?"])[-1]
    cpu = account.report({"peer": account.used("peer"),
                          "serving_replica": account.used("replicas", only=node),
                          "other_replicas": account.used("replicas", but=node),
                          "brokers": account.used("brokers")}, counter.n)
    return {"peer_handled": counter.n, "peer_seconds": round(seconds, 3),
            "peer_msgs_per_s": int(counter.n / seconds) if seconds > 0 else 0,
            "peer_start_to_done_s": round(start_s, 2), "replayed": st["replayed"],
            "replay_ms": st["replay_ms"], "barrier": st["barrier"], "node": node,
            "rss": rss.report(node), "cpu": cpu}


def settle(say: Say, timeout_s: float) -> dict[str, Any]:
    """Wait until the machine is quiet: the replica nodes have ingested the backlog just
    written and LevelDB has compacted it. A real backlog builds up over the peer's
    downtime, its ingest and compactions spread over it; replaying while the nodes still
    digest a million records written seconds ago measures that instead (36k msgs/s against
    48k, same code; docs/replay.md)."""
    from tidemark.stack.settle import QUIET_CORES, wait_quiet
    if timeout_s <= 0:
        return {"settle_s": 0.0, "settled": None}
    got = wait_quiet(QUIET_CORES, timeout_s, progress=say)
    say(f"before the replay, machine {got.describe(QUIET_CORES)}")
    return {"settle_s": round(got.waited_s, 1), "settled": got.quiet}


def _peers_on(partition: int, partitions: int, count: int, stem: str) -> list[str]:
    """``count`` new peer ids whose txlog partition is ``partition``: the security rounds
    replay from the same replica nodes as the headline replay."""
    out: list[str] = []
    while len(out) < count:
        peer = f"{stem}-{secrets.token_hex(3)}"
        if partition_for_peer(peer, partitions) == partition:
            out.append(peer)
    return out


def _before_round(settings: Settings, peer: str, direct: bool, say: Say,
                  settle_s: float) -> None:
    """Before a further replay round: with ``direct`` (the bench stands in for the queues
    job) say the queues cover what the replays before appended (their acks), then let the
    machine settle."""
    if direct:
        k = partition_for_peer(peer, len(watermarks(settings, "txlog")))
        cover(LogProducer(settings), k, end_offsets(settings, "txlog", [k])[k])
    settle(say, settle_s)


def security_rounds(settings: Settings, peers: list[str], n: int, state_dir: str | None,
                    switch: Callable[[bool], float], timeout_s: float, say: Say,
                    settle_s: float, batch: int, window: int, handler: str,
                    direct: bool = True) -> dict[str, Any]:
    """One replay of ``n`` per peer of ``peers`` (each filled already), secure and insecure
    in turn (:func:`round_modes`), the replica nodes switched before each (``switch``) and
    the machine let settle after the restart; the ``security_*`` fields. ``direct``: the
    bench stands in for the queues job (``--fill direct``) and says the queues cover what
    the replays before appended (their Acks)."""
    rates: dict[bool, list[float]] = {False: [], True: []}
    restarts: list[float] = []
    for peer, insecure in zip(peers, round_modes(len(peers) // 2), strict=True):
        side = "insecure" if insecure else "secure"
        took = switch(insecure)
        if took:
            restarts.append(round(took, 2))
            say(f"replica nodes restarted {side} in {took:.1f} s")
        _before_round(settings, peer, direct, say, settle_s)
        say(f"{side} round: replaying {n:,} messages into {peer}")
        got = peer_replay(settings, peer, n, stack_pids(state_dir, "replica"), timeout_s, say,
                          batch, window, stack_pids(state_dir, "broker"), handler, insecure)
        rates[insecure].append(got["peer_msgs_per_s"])
        say(f"{side} round: {got['peer_msgs_per_s']:,} msgs/s")
    out = compare_throughput(rates[False], rates[True])
    out["security"].update({"messages": n, "restarts_s": restarts})
    return out


def ack_modes(rounds: int) -> list[bool]:
    """Whether each of ``rounds`` ack rounds acks by range: by id first in even pairs, by
    range first in odd ones, so neither mode always runs on the later, warmer stack."""
    return [(i % 2 == 1) if (i // 2) % 2 == 0 else (i % 2 == 0) for i in range(rounds)]


def _median(values: list[float | None]) -> float | None:
    got = sorted(v for v in values if v is not None)
    if not got:
        return None
    mid = len(got) // 2
    return got[mid] if len(got) % 2 else (got[mid - 1] + got[mid]) / 2


def compare_acks(by_id: list[dict[str, Any]], ranged: list[dict[str, Any]], n: int
                 ) -> dict[str, Any]:
    """The ``acks`` fields from the :func:`peer_replay` results of each mode's rounds: the
    rates and machine CPU per message of each, and range / by id of their medians (rate:
    higher is better; machine CPU: lower is better)."""
    def side(rounds: list[dict[str, Any]]) -> dict[str, Any]:
        return {"msgs_per_s": [r["peer_msgs_per_s"] for r in rounds],
                "machine_us_per_msg": [r["cpu"]["us_per_msg"].get("machine") for r in rounds],
                "us_per_msg": [r["cpu"]["us_per_msg"] for r in rounds]}
    a, b = side(by_id), side(ranged)
    rate = (_median(b["msgs_per_s"]), _median(a["msgs_per_s"]))
    cpu = (_median(b["machine_us_per_msg"]), _median(a["machine_us_per_msg"]))
    return {"compared": bool(by_id and ranged), "messages": n, "by_id": a, "range": b,
            "rate_ratio": round(rate[0] / rate[1], 3) if rate[0] and rate[1] else None,
            "machine_us_ratio": round(cpu[0] / cpu[1], 3) if cpu[0] and cpu[1] else None}


def ack_rounds(settings: Settings, peers: list[str], n: int, state_dir: str | None,
               timeout_s: float, say: Say, settle_s: float, batch: int, window: int,
               handler: str, direct: bool = True) -> dict[str, Any]:
    """One replay of ``n`` per peer of ``peers`` (each filled already), acking by id and by
    range in turn (:func:`ack_modes`); the ``acks`` fields (:func:`compare_acks`)."""
    got: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for peer, ranged in zip(peers, ack_modes(len(peers)), strict=True):
        _before_round(settings, peer, direct, say, settle_s)
        mode = "range acks" if ranged else "acks by id"
        say(f"{mode} round: replaying {n:,} messages into {peer}")
        one = peer_replay(settings, peer, n, stack_pids(state_dir, "replica"), timeout_s, say,
                          batch, window, stack_pids(state_dir, "broker"), handler,
                          range_acks=ranged)
        got[ranged].append(one)
        say(f"{mode} round: {one['peer_msgs_per_s']:,} msgs/s,"
            f" machine {one['cpu']['us_per_msg'].get('machine')} us/msg")
    return {"acks": compare_acks(got[False], got[True], n)}


def bench_replay(settings: Settings, messages: int = 1_000_000, payload_bytes: int = 150,
                 fill_mode: str = "direct", state_dir: str | None = None,
                 timeout_s: float = 900.0, say: Say = print, batch: int = DEFAULT_BATCH,
                 window: int = DEFAULT_WINDOW, settle_s: float = 300.0,
                 handler: str = "batch", switch: Callable[[bool], float] | None = None,
                 pairs: int = 2, security_messages: int | None = None,
                 skip_reason: str = "--no-security-compare",
                 ack_pairs: int = 1) -> dict[str, Any]:
    """The whole bench; returns the figures (see the module doc). ``switch`` (the replica
    nodes to plaintext with True, to TLS with False): after the headline replay, ``pairs``
    secure and insecure rounds in turn, each replaying a backlog of its own of
    ``security_messages`` (default a quarter of ``messages``) filled with the headline's,
    on the same partition; the ``security_*`` fields compare them."""
    from tidemark.gossip.cluster_config import ConfigLog
    config = ConfigLog(settings)
    try:
        if config.read_to_end() is None:
            raise TidemarkError("bench replay needs replica nodes (tidemark local up"
                                " --replicas 1x1 or more)")
    finally:
        config.close()
    peer = f"bench-replay-{secrets.token_hex(3)}"
    partitions = len(watermarks(settings, "txlog"))
    k = partition_for_peer(peer, partitions)
    payload = message_type_of(BenchItem).serializer.encode(BenchItem(b"x" * payload_bytes))
    say(f"fill ({fill_mode}): {messages:,} messages to {peer} (txlog/{k}),"
        f" {len(payload)}-byte payloads")
    t0 = time.perf_counter()
    q0, _ = fill(settings, peer, k, messages, payload, fill_mode == "direct", say)
    fill_s = time.perf_counter() - t0
    each = max(1, security_messages or messages // 4)
    rounds = _peers_on(k, partitions, 2 * max(1, pairs), peer) if switch is not None else []
    for other in rounds:
        say(f"fill ({fill_mode}): {each:,} messages to {other} for a security round")
        fill(settings, other, k, each, payload, fill_mode == "direct", say)
    acking = _peers_on(k, partitions, 2 * ack_pairs, peer + "-ack") if ack_pairs > 0 else []
    for other in acking:
        say(f"fill ({fill_mode}): {each:,} messages to {other} for an ack round")
        fill(settings, other, k, each, payload, fill_mode == "direct", say)
    say(f"fill done in {fill_s:.1f}s; waiting until the replicas have stored it")
    settled = settle(say, settle_s)
    result: dict[str, Any] = {"messages": messages, "payload_bytes": len(payload),
                              "fill": fill_mode, "fill_s": round(fill_s, 1), "peer": peer,
                              "partition": k, "batch": batch, "window": window,
                              "handler": handler, **settled}
    brokers = stack_pids(state_dir, "broker")
    say("raw confluent-kafka consumer on the same queue records")
    result.update(raw_read(settings, peer, k, q0, messages, timeout_s, say, brokers))
    settle(say, settle_s)
    say("the user's loop (consumer, fastavro, payload decode, commits) on the same records")
    result.update(user_loop_read(settings, peer, k, q0, messages, timeout_s, say, brokers))
    again = settle(say, settle_s)
    result["settle_before_replay_s"] = again["settle_s"]
    say(f"replaying into a Peer's {handler} handler (replay on start, batch {batch},"
        f" window {window})")
    result.update(peer_replay(settings, peer, messages, stack_pids(state_dir, "replica"),
                              timeout_s, say, batch, window, brokers, handler))
    raw, loop = result["raw_msgs_per_s"], result["user_loop_msgs_per_s"]
    result["ratio"] = round(result["peer_msgs_per_s"] / raw, 3) if raw else None
    result["user_loop_ratio"] = round(result["peer_msgs_per_s"] / loop, 3) if loop else None
    result["target_msgs_per_s"], result["target_ratio"] = TARGET_RATE, TARGET_RATIO
    result["target_user_loop_ratio"] = TARGET_USER_LOOP_RATIO
    result["target_machine_us_per_msg"] = TARGET_MACHINE_US
    if acking:
        result.update(ack_rounds(settings, acking, each, state_dir, timeout_s, say, settle_s,
                                 batch, window, handler, fill_mode == "direct"))
    else:
        result["acks"] = {"compared": False}
    if switch is None:
        return {**result, **skipped(skip_reason)}
    return {**result, **security_rounds(settings, rounds, each, state_dir, switch, timeout_s,
                                        say, settle_s, batch, window, handler,
                                        fill_mode == "direct")}
