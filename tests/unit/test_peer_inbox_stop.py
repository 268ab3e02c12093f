"""Phase changes of the inbox. A stopping peer handles nothing new: whatever arrives once it
is stopping (direct, replay or from its txlog follower) is dropped unacked and unremembered,
and a message decided to run just before is submitted before ``stop_admitting`` returns (so
the drain covers it). Leaving replay dispatches the held-back messages before any newer one."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from tidemark.peer_client import message
from tidemark.peer_client.context import Phase
from tidemark.peer_client.decisions import DROP, RUN, decide
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.handlers import HandlerRegistry
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.jobs import Job
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.records import Envelope


@message("unit.StopTick")
@dataclass
class StopTick:
    n: int


def _env(n: int, replay: bool = False) -> Envelope:
    return Envelope(f"m{n}", "A", "unit.StopTick", message_type_of(StopTick).serializer.encode(
        StopTick(n)), 0, True, "test", replay=replay)


def _handlers() -> HandlerRegistry:
    reg = HandlerRegistry()
    reg.add(lambda msg: None, StopTick)
    return reg


def test_decide_drops_without_remembering_once_stopping() -> None:
    dedup, handlers = DedupWindow(10), _handlers()
    for phase in (Phase.STOPPING, Phase.STOPPED):
        for replay in (False, True):
            d = decide(_env(1, replay), phase, "test", dedup, handlers)
            assert (d.action, d.kind) == (DROP, "stopping")
            assert "m1" not in dedup
    assert decide(_env(1), Phase.NORMAL, "test", dedup, handlers).action == RUN
    assert "m1" in dedup


def test_stop_admitting_waits_for_a_decided_message_then_refuses_new_ones() -> None:
    submitted: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def submit(key: str, job: Job) -> None:
        entered.set()
        release.wait(10)
        submitted.append(job.env.message_id)

    stats: Counter[str] = Counter()
    inbox = Inbox("B", "test", _handlers(), DedupWindow(10), submit, lambda *a: None,
                  lambda env: None, stats)
    inbox.phase = Phase.NORMAL
    t = threading.Thread(target=inbox.accept, args=(_env(1),))
    t.start()
    assert entered.wait(10)
    assert inbox.stop_admitting(Phase.STOPPING, 0.2) is False  # m1 decided, not submitted
    assert inbox.phase is Phase.STOPPING
    release.set()
    assert inbox.stop_admitting(Phase.STOPPING, 10) is True
    assert submitted == ["m1"]
    t.join(10)
    inbox.accept(_env(2))
    inbox.accept(_env(3, replay=True))
    assert submitted == ["m1"] and stats["refused_stopping"] == 2
    assert "m2" not in inbox.dedup and "m3" not in inbox.dedup


def test_release_keeps_live_arrivals_behind_the_held_messages() -> None:
    """End of replay: a live message arriving while the held-back ones are being released
    is dispatched after them, never between (per-sender order across the switch)."""
    order: list[str] = []
    inbox: Inbox
    late: list[threading.Thread] = []

    def submit(key: str, job: Job) -> None:
        order.append(job.env.message_id)
        if job.env.message_id == "m1":  # m3 arrives live while m1..m2 are being released
            t = threading.Thread(target=inbox.accept, args=(_env(3),))
            t.start()
            late.append(t)
            t.join(0.2)  # it waits for the release (an old build let it in between)

    inbox = Inbox("B", "test", _handlers(), DedupWindow(10), submit, lambda *a: None,
                  lambda env: None, Counter())
    inbox.phase = Phase.REPLAY
    inbox.accept(_env(1))
    inbox.accept(_env(2))
    assert [e.message_id for e in inbox.held.envelopes()] == ["m1", "m2"] and order == []
    inbox.release(Phase.NORMAL)
    late[0].join(10)
    assert order == ["m1", "m2", "m3"] and inbox.phase is Phase.NORMAL and not inbox.held
    inbox.accept(_env(4))
    assert order[-1] == "m4"
