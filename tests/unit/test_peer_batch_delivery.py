"""Batched delivery of replayed messages (``PeerCore.deliver_replayed_batch`` ->
``Inbox.accept_many`` -> one ``RunJob`` per sender on the ``ThreadExecutor``) behaves exactly like delivering them
one by one: same handler runs in per-sender order, same dedup, same stats, acks and failure
reports; the inbox ``limit`` still bounds unfinished messages; held-back and stopping
decisions are the same."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.peer_batches import (
    ENCODE,
    BatchItem,
    Log,
    core_of,
    deliver_columns,
    envelopes,
    lean_messages,
    messages,
    model,
)
from tidemark.log.wire import AckBatchEncoder, default_codec
from tidemark.peer_client import MessageContext
from tidemark.peer_client.acks import MAX_BATCH_BYTES, chunks
from tidemark.peer_client.context import Phase
from tidemark.peer_client.core import PeerCore
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.executor import ThreadExecutor
from tidemark.peer_client.handlers import HandlerRegistry
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.jobs import Job, RunJob
from tidemark.peer_client.options import PeerOptions
from tidemark.peer_client.records import Envelope

CODEC = default_codec()


def _run(spec: list[tuple[str, int, str]], batched: bool | str, chunk: int,
         limit: int) -> tuple[Any, ...]:
    core, port, handled = core_of(limit)
    envs = envelopes(spec)
    for i, env in enumerate(envs):
        env.replay = True
        env.txlog_offset = 10 * i
    if batched == "columns":
        lean = deliver_columns(core, envs, chunk)
        assert lean == -(-len(envs) // chunk) or not lean_only(spec)
    elif batched:
        for i in range(0, len(envs), chunk):
            core.deliver_replayed_batch(envs[i:i + chunk])
    else:
        for env in envs:
            core.deliver_replayed(env)
    assert core.executor.drain(10)
    core.flush_acks()
    core.executor.close()
    stats = {k: v for k, v in core.stats.items() if k != "acks"}
    return dict(handled), stats, port.ids("Ack"), port.ids("DeliveryFailed")


@settings(max_examples=60, deadline=None)
@given(messages, st.integers(1, 25), st.sampled_from([1, 3, 1000]))
def test_batched_delivery_equals_one_by_one(spec: list[tuple[str, int, str]], chunk: int,
                                            limit: int) -> None:
    one = _run(spec, False, chunk, limit)
    many = _run(spec, True, chunk, limit)
    assert many == one
    assert many[0] == model(spec)
    oks = {f"m{n}" for _, n, kind in spec if kind == "ok"}
    assert many[2] == sorted(oks)  # every handled message acked once, failures never
    assert len(many[3]) == sum(1 for *_, kind in spec if kind != "ok")


def lean_only(spec: list[tuple[str, int, str]]) -> bool:
    return all(kind in ("ok", "fail") for *_, kind in spec)


@settings(max_examples=60, deadline=None)
@given(st.one_of(lean_messages, messages), st.integers(1, 25), st.sampled_from([1, 3, 1000]))
def test_the_lean_path_equals_one_by_one(spec: list[tuple[str, int, str]], chunk: int,
                                         limit: int) -> None:
    """A replayed chunk as columns (``Inbox.accept_columns``, the lean path) ends exactly as
    delivering its messages one by one: handler runs in per-sender order, dedup, stats, acks
    and failure reports. A chunk it cannot take (an unknown type, a malformed payload) goes
    the general way, with nothing done twice."""
    one = _run(spec, False, chunk, limit)
    lean = _run(spec, "columns", chunk, limit)
    assert lean == one
    assert lean[0] == model(spec)


def test_the_inbox_limit_bounds_unfinished_messages_of_a_batch() -> None:
    release = threading.Event()
    running: list[int] = []
    lock = threading.Lock()

    def slow(msg: BatchItem, ctx: MessageContext) -> None:
        with lock:
            running.append(msg.n)
        assert release.wait(10)
    core, _, _ = core_of(limit=3, workers=8, slow=slow)
    envs = [Envelope(f"m{i}", f"S{i}", "unit.BatchItem", ENCODE(BatchItem(i)), 1, True,
                     "test") for i in range(10)]
    t = threading.Thread(target=core.deliver_replayed_batch, args=(envs,), daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while len(running) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)  # waiting for a condition, with a deadline
    t.join(0.3)
    assert t.is_alive() and len(running) == 3  # blocked on the limit, 3 submitted and run
    release.set()
    t.join(10)
    assert not t.is_alive()
    assert core.executor.drain(10) and sorted(running) == list(range(10))
    core.executor.close()


def _submitted_ids(jobs: list[tuple[str, Job | RunJob]]) -> list[str]:
    """Message ids of the submitted jobs, in order (a RunJob holds a sender's run)."""
    return [env.message_id for _, j in jobs
            for env in ([j.env] if isinstance(j, Job) else [e for e, _, _ in j.items])]


def _inbox(submit_many: Any) -> tuple[Inbox, list[tuple[str, Job | RunJob]], dict[str, int]]:
    jobs: list[tuple[str, Job | RunJob]] = []
    stats: dict[str, int] = defaultdict(int)
    reg = HandlerRegistry()
    reg.add(lambda msg: None, BatchItem)
    inbox = Inbox("B", "test", reg, DedupWindow(100), lambda k, j: jobs.append((k, j)),
                  lambda *a: None, lambda env: None, stats, None,
                  submit_many and (lambda k, js: jobs.extend((k, j) for j in js)))
    return inbox, jobs, stats


def test_held_back_and_stopping_decisions_are_the_same_in_a_batch() -> None:
    for submit_many in (None, True):
        inbox, jobs, stats = _inbox(submit_many)
        live = [Envelope(f"m{i}", "A", "unit.BatchItem", ENCODE(BatchItem(i)), 1, True, "test")
                for i in range(5)]
        inbox.phase = Phase.REPLAY
        inbox.accept_many(live)
        assert inbox.held.envelopes() == live and stats["held_back"] == 5 and not jobs
        inbox.phase = Phase.STOPPING
        inbox.accept_many([Envelope("x", "A", "unit.BatchItem", ENCODE(BatchItem(9)), 1,
                                    True, "test", replay=True)])
        assert stats["refused_stopping"] == 1 and not jobs and "x" not in inbox.dedup
        assert inbox.stop_admitting(Phase.STOPPED, 1.0)
        inbox.phase = Phase.NORMAL
        inbox.accept_many(live + live)
        assert _submitted_ids(jobs) == [e.message_id for e in live]
        assert stats["duplicates"] == 5


class _Store:
    """A completed-ids store (``CompletedIds``) that lists what it recorded, in order."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def __contains__(self, message_id: object) -> bool:
        return message_id in self.ids

    def record(self, message_id: str, now_ms: int) -> bool:
        self.ids.append(message_id)
        return True


def test_a_run_records_each_id_in_the_store_as_soon_as_its_handler_returned() -> None:
    """A sender's run is one RunJob, and the persisted store learns each id right after its
    handler (not at the end of the run): a crash mid-run cannot repeat a handled message."""
    store, before, acked = _Store(), [], []
    reg = HandlerRegistry()
    reg.add(lambda msg: before.append(list(store.ids)), BatchItem)
    jobs: list[Any] = []
    inbox = Inbox("B", "test", reg, DedupWindow(100), lambda k, j: jobs.append(j),
                  lambda *a: None, acked.append, defaultdict(int), None,
                  lambda k, js: jobs.extend(js), acked.extend)
    inbox.completed = store
    inbox.phase = Phase.NORMAL
    inbox.accept_many([Envelope(f"m{i}", "A", "unit.BatchItem", ENCODE(BatchItem(i)), 1, True,
                                "test") for i in range(4)])
    assert len(jobs) == 1 and isinstance(jobs[0], RunJob)
    jobs[0].run()
    assert before == [[], ["m0"], ["m0", "m1"], ["m0", "m1", "m2"]]
    assert store.ids == ["m0", "m1", "m2", "m3"] == [e.message_id for e in acked]


def test_submit_many_keeps_per_key_order_with_one_at_a_time() -> None:
    ex = ThreadExecutor(4)
    seen: dict[str, list[int]] = defaultdict(list)
    busy: set[str] = set()
    overlap: list[str] = []

    class J:
        is_async = False

        def __init__(self, key: str, n: int) -> None:
            self.key, self.n = key, n

        def run(self) -> None:
            if self.key in busy:
                overlap.append(self.key)
            busy.add(self.key)
            seen[self.key].append(self.n)
            busy.discard(self.key)

    for start in range(0, 300, 30):
        for key in "XYZ":
            ex.submit_many(key, [J(key, n) for n in range(start, start + 30)])
            ex.submit(key, J(key, start + 1000))
    assert ex.drain(10) and ex.active == 0
    ex.submit_many("X", [])
    for key in "XYZ":
        assert seen[key] == [n for s in range(0, 300, 30)
                             for n in (*range(s, s + 30), s + 1000)]
    assert not overlap
    ex.close()


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1).filter(lambda s: "\0" not in s), st.text(min_size=1),
       st.lists(st.one_of(st.text(), st.text(min_size=60, max_size=70)), max_size=5),
       st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=1, max_size=3))
def test_the_ack_batch_encoding_is_the_codecs(peer: str, environment: str, mids: list[str],
                                              stamps: list[int]) -> None:
    port = Log()
    core = PeerCore(peer, environment, PeerOptions(), log_port=port, direct=port,
                    directory_port=port, stability=None, executor=ThreadExecutor(1),
                    max_message_bytes=1 << 20)
    enc = AckBatchEncoder(CODEC, peer, environment)
    assert enc.encode == enc.encode_fast
    for ts in stamps:
        want = CODEC.encode("AckBatch", {"peer": peer, "environment": environment,
                                         "message_ids": mids, "timestamp_ms": ts})
        assert enc.encode(mids, ts) == core.acker.encode_acks(mids, ts) == want
        assert CODEC.decode(want).record["message_ids"] == mids
    core.executor.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=60), st.integers(1, 10),
       st.integers(1, 200))
def test_ack_chunks_keep_every_id_once_in_order_within_bounds(
        ids: list[str], max_ids: int, max_bytes: int) -> None:
    runs = list(chunks(ids, max_ids, max_bytes))
    assert [m for run in runs for m in run] == ids
    for run in runs:  # a run over the byte bound is a single long id
        assert 0 < len(run) <= max_ids
        assert sum(len(m) + 2 for m in run) <= max_bytes or len(run) == 1
    assert MAX_BATCH_BYTES < 1 << 20


def test_the_lean_path_leaves_to_the_general_one_what_it_does_not_take() -> None:
    """``accept_columns`` returns None, having changed nothing (dedup, stats, jobs), for a
    chunk the general path must decide: no batch executor, the persisted dedup store, an
    ``async def`` handler, the peer stopping, or an id the held-back list watches for."""
    from tests.peer_batches import columns_of
    envs = [Envelope(f"m{i}", "A", "unit.BatchItem", ENCODE(BatchItem(i)), 1, True, "test",
                     0, True, 0, i) for i in range(4)]
    cols = columns_of(envs)

    def untouched(inbox: Inbox, jobs: list[Any], stats: dict[str, int]) -> None:
        assert inbox.accept_columns(cols) is None
        assert not jobs and not any(stats.values()) and len(inbox.dedup) == 0

    inbox, jobs, stats = _inbox(None)
    inbox.phase = Phase.REPLAY
    untouched(inbox, jobs, stats)  # no submit_many: the general path's one-by-one jobs
    inbox, jobs, stats = _inbox(True)
    inbox.phase = Phase.REPLAY
    inbox.completed = _Store()
    untouched(inbox, jobs, stats)
    inbox.completed = None
    inbox.phase = Phase.STOPPING
    untouched(inbox, jobs, stats)
    inbox.phase = Phase.REPLAY
    live = Envelope("m2", "A", "unit.BatchItem", ENCODE(BatchItem(2)), 1, True, "test")
    inbox.accept_many([live])  # held back during replay: its logged copy matters
    assert inbox.held.watching and stats["held_back"] == 1
    stats.clear()
    assert inbox.accept_columns(cols) is None and not jobs and len(inbox.dedup) == 0
    inbox.held.seen("m2")
    assert inbox.accept_columns(cols) == 4 and len(jobs) == 1  # one sender: one job

    async def handle_async(msg: BatchItem) -> None: ...
    reg = HandlerRegistry()
    reg.add(handle_async, BatchItem)
    inbox, jobs, stats = _inbox(True)
    inbox.handlers = reg
    inbox.phase = Phase.REPLAY
    untouched(inbox, jobs, stats)
