"""Batch handlers (``Peer.batch_handler``): a replayed run reaches the handler as lists of
consecutive messages, in order, each message in exactly one call; ``BatchFailed`` fails only
the messages it names, any other exception the whole call; the outcome (what is acked, what
is reported, per-sender order, dedup) equals one-by-one delivery to a plain handler."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.peer_batches import (
    BatchItem,
    core_of,
    deliver_columns,
    envelopes,
    lean_messages,
    messages,
    model,
)
from tidemark.peer_client import BatchContext, BatchFailed, MessageContext, message
from tidemark.peer_client.exceptions import HandlerError
from tidemark.peer_client.handlers import Handler, HandlerRegistry
from tidemark.peer_client.jobs import Job, RunJob
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.records import Envelope
from tidemark.peer_client.testing import TestBus


@message("unit.BatchHandled")
@dataclass
class Handled:
    n: int


def _batchcore_of(limit: int) -> tuple[Any, Any, dict[str, list[int]], list[int]]:
    """A core whose BatchItem handler is a batch handler failing the ``fail`` items."""
    calls: list[int] = []

    def on_items(items: list[BatchItem], ctx: BatchContext) -> None:
        calls.append(len(items))
        assert len(ctx) == len(items) and ctx.replay
        for item, c in zip(items, ctx, strict=True):
            handled[c.sender].append(item.n)
        failed = {i: f"item {m.n} fails" for i, m in enumerate(items) if m.fail}
        if failed:
            raise BatchFailed(failed)

    core, port, _ = core_of(limit, slow=lambda *a: None)
    core.handlers = HandlerRegistry()
    core.inbox.handlers = core.handlers
    core.batch_handler(on_items)
    handled: dict[str, list[int]] = defaultdict(list)
    return core, port, handled, calls


def _deliver(spec: list[tuple[str, int, str]], chunk: int, limit: int,
             lean: bool = False) -> tuple[Any, ...]:
    core, port, handled, calls = _batchcore_of(limit)
    envs = envelopes(spec)
    if lean:
        for env in envs:
            env.replay = True
        deliver_columns(core, envs, chunk)
    else:
        for i in range(0, len(envs), chunk):
            core.deliver_replayed_batch(envs[i:i + chunk])
    assert core.executor.drain(10)
    core.flush_acks()
    core.executor.close()
    return dict(handled), port.ids("Ack"), port.ids("DeliveryFailed"), calls, core.stats


@settings(max_examples=60, deadline=None)
@given(messages, st.integers(1, 25), st.sampled_from([1, 3, 1000]))
def test_a_batch_handler_sees_what_a_plain_handler_sees(spec: list[tuple[str, int, str]],
                                                       chunk: int, limit: int) -> None:
    handled, acks, failed, calls, stats = _deliver(spec, chunk, limit)
    assert handled == model(spec)  # per-sender order, duplicates dropped, failures seen once
    assert acks == sorted({f"m{n}" for _, n, kind in spec if kind == "ok"})
    assert len(failed) == sum(1 for *_, kind in spec if kind != "ok")
    runnable = sum(len(v) for v in handled.values())
    assert sum(calls) == runnable and stats["handled"] + stats["handler_failed"] == runnable


@settings(max_examples=60, deadline=None)
@given(st.one_of(lean_messages, messages), st.integers(1, 25), st.sampled_from([1, 3, 1000]))
def test_the_lean_path_calls_a_batch_handler_as_the_general_path_does(
        spec: list[tuple[str, int, str]], chunk: int, limit: int) -> None:
    """Chunks as columns (``Inbox.accept_columns``): the same handled messages, acks,
    failures and handler calls (one per sender's stretch of a chunk, while the inbox limit
    leaves room) as envelopes, with the
    context built from the columns (``ctx.sender``, ``ctx.replay``)."""
    general = _deliver(spec, chunk, limit)
    lean = _deliver(spec, chunk, limit, lean=True)
    assert lean[:3] == general[:3]
    assert sum(lean[3]) == sum(general[3])
    if limit == 1000:  # no wait for a slot: one call per sender's stretch of a chunk on both
        assert sorted(lean[3]) == sorted(general[3])
    assert {k: v for k, v in lean[4].items() if k != "acks"} == \
        {k: v for k, v in general[4].items() if k != "acks"}


# ---- RunJob against a reference model ------------------------------------------------------

def _handlers(log: list[tuple[str, list[int]]]) -> dict[str, Handler]:
    """Two batch handlers and a plain one, each logging its calls."""
    mt = message_type_of(Handled)

    def batch(name: str) -> Any:
        def fn(msgs: list[tuple[int, str]], ctx: BatchContext) -> None:
            log.append((name, [n for n, _ in msgs]))
            if any(how == "raise" for _, how in msgs):
                raise RuntimeError("the whole batch fails")
            failed = {i: "named" for i, (_, how) in enumerate(msgs) if how == "named"}
            if failed:
                raise BatchFailed(failed)
        return fn

    def single(msg: tuple[int, str], ctx: MessageContext) -> None:
        log.append(("single", [msg[0]]))
        if msg[1] != "ok":
            raise RuntimeError("fails")

    return {"b1": Handler(mt, batch("b1"), False, True, True),
            "b2": Handler(mt, batch("b2"), False, True, True),
            "single": Handler(mt, single, False, True, False)}


def _runmodel(spec: list[tuple[str, str]]) -> tuple[list[tuple[str, list[int]]], list[int],
                                                     list[int]]:
    """Calls, ok and failed of a run: a stretch of one batch handler is one call, failed
    whole if one message says raise, else in the messages named; a plain handler per
    message."""
    calls: list[tuple[str, list[int]]] = []
    ok: list[int] = []
    failed: list[int] = []
    i = 0
    while i < len(spec):
        name = spec[i][0]
        j = i
        while j < len(spec) and spec[j][0] == name:
            j += 1
        stretch = list(range(i, j))
        if name == "single":
            calls += [("single", [k]) for k in stretch]
            bad = {k for k in stretch if spec[k][1] != "ok"}
        else:
            calls.append((name, stretch))
            whole = any(spec[k][1] == "raise" for k in stretch)
            bad = set(stretch) if whole else {k for k in stretch if spec[k][1] == "named"}
        ok += [k for k in stretch if k not in bad]
        failed += [k for k in stretch if k in bad]
        i = j
    return calls, ok, failed


runs = st.lists(st.tuples(st.sampled_from(["b1", "b2", "single"]),
                          st.sampled_from(["ok", "ok", "ok", "named", "raise"])), max_size=40)


@settings(max_examples=200, deadline=None)
@given(runs, st.booleans())
def test_run_job_calls_each_stretch_once(spec: list[tuple[str, str]], record: bool) -> None:
    log: list[tuple[str, list[int]]] = []
    handlers = _handlers(log)
    items = [(Envelope(f"m{i}", "A", "unit.BatchHandled", b"", 1, True, "test", 0, True),
              handlers[name], (i, how)) for i, (name, how) in enumerate(spec)]
    recorded: list[str] = []
    out: list[Any] = []
    RunJob(items, "B", recorded.append if record else None,
           lambda ok, failed, abandoned: out.extend([ok, failed])).run()
    calls, ok, failed = _runmodel(spec)
    assert log == calls
    assert [e.message_id for e in out[0]] == [f"m{k}" for k in ok]
    assert [e.message_id for e, _ in out[1]] == [f"m{k}" for k in failed]
    assert recorded == ([e for e in out[0]] if record else [])


def test_a_single_job_calls_a_batch_handler_with_a_list_of_one() -> None:
    log: list[tuple[str, list[int]]] = []
    h = _handlers(log)["b1"]
    env = Envelope("m1", "A", "unit.BatchHandled", b"", 1, True, "test")
    done: list[Any] = []
    for how in ("ok", "named", "raise"):
        Job(env, h, (7, how), "B", lambda job, error: done.append(error)).run()
    assert log == [("b1", [7])] * 3
    assert done[0] is None and str(done[1]) == "named" and isinstance(done[2], RuntimeError)


def test_an_async_batch_handler_runs_on_the_loop() -> None:
    seen: list[list[Handled]] = []

    async def on(msgs: list[Handled], ctx: BatchContext) -> None:
        seen.append(msgs)
        raise BatchFailed({0: ValueError("no")})
    reg = HandlerRegistry()
    h = reg.add(on, None, batch=True)
    assert h.batch and h.is_async and h.takes_context
    done: list[Any] = []
    env = Envelope("m1", "A", "unit.BatchHandled", b"", 1, True, "test")
    asyncio.run(Job(env, h, Handled(1), "B", lambda j, e: done.append(e)).run_async())
    assert seen == [[Handled(1)]] and isinstance(done[0], ValueError)


def test_batch_handler_annotations() -> None:
    reg = HandlerRegistry()

    def plain(msg: Handled) -> None: ...
    with pytest.raises(HandlerError, match=r"list\[MyMessage\]"):
        reg.add(plain, None, batch=True)

    def listed(msgs: list[Handled]) -> None: ...
    h = reg.add(listed, None, batch=True)
    assert h.batch and not h.takes_context and h.message_type.name == "unit.BatchHandled"


def test_live_messages_reach_a_batch_handler_one_at_a_time_on_the_test_bus() -> None:
    bus = TestBus()
    a, b = bus.peer("A", start=False), bus.peer("B", start=False)
    calls: list[list[int]] = []

    @b.batch_handler
    def on(msgs: list[Handled], ctx: BatchContext) -> None:
        calls.append([m.n for m in msgs])
        assert ctx.message_ids and not ctx.replay and ctx.peer_id == "B"
        if msgs[0].n == 2:
            raise BatchFailed({0: "two is refused"})
    a.start()
    b.start()
    for n in range(4):
        a.send("B", Handled(n))
    bus.run_until_idle()
    assert calls == [[0], [1], [2], [3]]
    assert b.stats["handled"] == 3 and b.stats["handler_failed"] == 1
    failures = [r.record for r in bus.records if r.name == "DeliveryFailed"]
    assert [f["reason"] for f in failures] == ["MessageFailed: two is refused"]
