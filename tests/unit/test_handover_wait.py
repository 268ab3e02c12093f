"""The handover waits for a held message's logged copy to reach the log (a sender's append
can land seconds after its direct copy) instead of releasing it after a few quick reads to
the end: released early, it would be handled before an earlier message of its sender that
the log delivers later. The follower, inbox and end offsets are in-memory stand-ins."""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.log.settings import Settings
from tidemark.peer_client.replay import replayer as replayer_mod
from tidemark.peer_client.replay.replayer import ReplicaReplayer


class Log:
    """A txlog partition whose end grows by one record per ``grow_every`` follower steps;
    the held message's copy is the record at ``held_at``."""

    def __init__(self, held_at: int, grow_every: int) -> None:
        self.end, self.held_at, self.grow_every, self.steps = 10, held_at, grow_every, 0


class Follower:
    def __init__(self, log: Log, inbox: "Inbox") -> None:
        self.log, self.inbox, self.position = log, inbox, 0

    def _read_to(self, end: int) -> None:
        if self.position <= self.log.held_at < end:
            self.inbox.ids.discard("m")     # the logged copy went by: the held one is dropped
        self.position = max(self.position, end)

    def catch_up(self, target: int, deadline: float | None = None) -> bool:
        self._read_to(target)
        return True

    def step(self, timeout: float = 0.2) -> int:
        self.log.steps += 1
        if self.inbox.live:
            self.inbox.ids.add(f"live-{self.log.steps}")  # live traffic goes on meanwhile
        if self.log.steps % self.log.grow_every == 0:
            self.log.end += 1
        return 0


class Inbox:
    def __init__(self, live: bool = False) -> None:
        self.ids, self.released, self.live = {"m"}, False, live

    @property
    def unseen(self) -> int:
        return len(self.ids)

    def held_unseen_ids(self) -> set[str]:
        return set(self.ids)

    def held_still_unseen(self, ids: set[str]) -> set[str]:
        return ids & self.ids

    def forget_refused(self) -> None:
        self.released = True


class Core:
    peer_id = "B"

    def __init__(self, inbox: Inbox) -> None:
        self.inbox = inbox


def run_handover(monkeypatch: pytest.MonkeyPatch, held_at: int, wait_s: float,
                 grow_every: int = 3, live: bool = False
                 ) -> tuple[ReplicaReplayer, Inbox, Log]:
    log, inbox = Log(held_at, grow_every), Inbox(live)
    monkeypatch.setattr(replayer_mod, "end_offsets",
                        lambda settings, topic, parts: {parts[0]: log.end})
    r = ReplicaReplayer(Settings(), handover_wait_s=wait_s)
    r.partition = 0
    r.follower = Follower(log, inbox)  # type: ignore[assignment]
    core: Any = Core(inbox)
    r._handover(core)
    return r, inbox, log


def test_a_held_message_whose_append_lands_late_is_seen_not_released(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the copy lands 40 reads after the follower first reached the end: the old five
    # quick rounds released it; the handover now reads on until it goes by
    r, inbox, log = run_handover(monkeypatch, held_at=40, wait_s=60.0)
    assert inbox.unseen == 0 and not inbox.released
    assert r.handover_rounds_run > 5 and log.steps >= 3 * 30


def test_a_copy_that_never_lands_is_released_after_the_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the handover goes live; the sender's gate (its refused copies) keeps order from there
    r, inbox, _ = run_handover(monkeypatch, held_at=10**9, wait_s=0.3, grow_every=1)
    assert inbox.unseen == 1 and r.handover_rounds_run > 1


def test_live_messages_after_the_end_was_reached_do_not_extend_the_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a new live message is held at every read (a steady load): the handover waits for the
    # copy noted when it reached the end, not for theirs, so it ends once that one went by
    # (waiting for every held message sat out the full wait on every start under load)
    r, inbox, log = run_handover(monkeypatch, held_at=40, wait_s=60.0, live=True)
    assert "m" not in inbox.ids and inbox.unseen > 0 and not inbox.released
    assert log.end > 40
