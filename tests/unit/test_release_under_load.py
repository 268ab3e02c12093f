"""Leaving replay while live messages keep coming: the held-back list is released in one
step, so ``start()`` returns however fast traffic arrives, and no live message overtakes an
earlier held one of its sender. An earlier build released in rounds outside the lock; what
arrived during a round was held for the next, and with traffic as fast as the handlers the
list never emptied (a CI run saw start() stuck in it for 600 s). Real ``Inbox``, real
thread executor, a slow handler and a feeder thread; nothing is timed."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

from tidemark.peer_client import message
from tidemark.peer_client.context import Phase
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.executor import ThreadExecutor
from tidemark.peer_client.handlers import HandlerRegistry
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.records import Envelope


@message("unit.Released")
@dataclass
class Released:
    n: int


SENDERS = ("S0", "S1", "S2")
FEED_MAX = 40_000  # the feeder gives up here: the old release only returned after that


def test_release_ends_while_live_traffic_goes_on_and_keeps_each_senders_order() -> None:
    payload = message_type_of(Released).serializer.encode(Released(0))
    handled: list[str] = []
    lock = threading.Lock()

    def done(envs: list[Envelope]) -> None:
        with lock:
            handled.extend(e.message_id for e in envs)

    reg = HandlerRegistry()
    reg.add(lambda msg: time.sleep(0.0005), Released)  # slower than the feeder
    ex = ThreadExecutor(4, name="release-test")
    inbox = Inbox("B", "test", reg, DedupWindow(1 << 20), ex.submit, lambda *a: None,
                  lambda env: done([env]), Counter(), 8, ex.submit_many, done)
    inbox.phase = Phase.REPLAY
    sent: dict[str, list[str]] = defaultdict(list)

    def live(i: int) -> None:
        sender = SENDERS[i % 3]
        mid = f"{sender}-{i}"
        sent[sender].append(mid)
        inbox.accept(Envelope(mid, sender, "unit.Released", payload, 0, True, "test"))

    for i in range(600):                      # held back during the replay
        live(i)
    released = threading.Event()
    fed_at_release: list[int] = []
    fed = [600]

    def feeder() -> None:
        while not released.is_set() and fed[0] < FEED_MAX:
            live(fed[0])
            fed[0] += 1
        for _ in range(300):                  # a little more after the switch
            live(fed[0])
            fed[0] += 1

    t = threading.Thread(target=feeder, daemon=True)
    t.start()
    try:
        inbox.release(Phase.NORMAL)
        fed_at_release.append(fed[0])
        released.set()
        t.join(120)
        assert not t.is_alive()
        assert ex.drain(120)
    finally:
        released.set()
        ex.close()
    assert fed_at_release[0] < FEED_MAX, "release() only returned once live traffic stopped"
    assert inbox.phase is Phase.NORMAL and not inbox.held
    order: dict[str, list[str]] = defaultdict(list)
    for mid in handled:
        order[mid.split("-")[0]].append(mid)
    for sender in SENDERS:
        assert order[sender] == sent[sender], f"{sender}: handled out of arrival order"
