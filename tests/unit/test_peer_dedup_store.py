"""The persisted dedup store: owner checks, clear errors, and (through the in-memory bus) no
second handling of a message whose handler completed before a crash lost its ack."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tidemark.log import registry
from tidemark.log.settings import load_settings
from tidemark.peer_client import MessageContext, Peer, PeerOptions, message
from tidemark.peer_client.context import Phase
from tidemark.peer_client.decisions import DROP, RUN, decide
from tidemark.peer_client.dedup import DedupWindow
from tidemark.peer_client.dedup_store import DedupStore, resolve_dedup_dir, store_path
from tidemark.peer_client.exceptions import DedupStoreError
from tidemark.peer_client.handlers import HandlerRegistry
from tidemark.peer_client.inbox import Inbox
from tidemark.peer_client.messages import message_type_of
from tidemark.peer_client.records import Envelope
from tidemark.peer_client.testing import TestBus

DAY = 24 * 3600 * 1000


@message("tests.dedupstore.Item")
@dataclass
class Item:
    n: int


def _store(root: Path, peer: str = "B", env: str = "test", **kw: int) -> DedupStore:
    return DedupStore.for_peer(root, peer, env, kw.get("ttl_ms", DAY),
                               kw.get("max_entries", 1000))


def test_ids_survive_a_reopen_and_expire_by_age_and_count(tmp_path: Path) -> None:
    s = _store(tmp_path, max_entries=3)
    assert s.record("m1", 1_000) and not s.record("m1", 5_000)
    for i, t in ((2, 2_000), (3, 3_000), (4, 4_000)):
        s.record(f"m{i}", t)
    s.close()
    s = _store(tmp_path, max_entries=3)
    assert len(s) == 4 and "m1" in s and "m5" not in s
    assert s.sweep(4_000) == 1 and "m1" not in s and "m2" in s  # count: oldest first
    s.ttl_ms = 1_500
    assert s.sweep(4_600) == 2 and [m for m in ("m2", "m3", "m4") if m in s] == ["m4"]
    s.close()


def test_another_peers_or_environments_store_is_refused(tmp_path: Path) -> None:
    _store(tmp_path).close()
    with pytest.raises(DedupStoreError, match="belongs to peer B in environment 'test', not"
                                              " to peer C in 'test'"):
        DedupStore(store_path(tmp_path, "B"), "C", "test", DAY, 10)
    with pytest.raises(DedupStoreError, match="belongs to peer B in environment 'test', not"
                                              " to peer B in 'prod'"):
        _store(tmp_path, env="prod")
    _store(tmp_path).close()  # the owner still opens it


def test_a_store_in_use_is_one_clear_error(tmp_path: Path) -> None:
    s = _store(tmp_path)
    try:
        with pytest.raises(DedupStoreError, match="in use by another process"):
            _store(tmp_path)
    finally:
        s.close()


@pytest.mark.parametrize("damage", ["current", "manifest", "junk_folder", "file"])
def test_a_corrupt_store_folder_is_one_clear_error(tmp_path: Path, damage: str) -> None:
    path = store_path(tmp_path, "B")
    if damage == "file":
        path.write_text("not a store")
    elif damage == "junk_folder":
        path.mkdir()
        (path / "notes.txt").write_text("x")
    else:
        s = _store(tmp_path)
        s.record("m1", 1)
        s.close()
        if damage == "current":
            (path / "CURRENT").write_text("MANIFEST-999999\n")
        else:
            for manifest in path.glob("MANIFEST-*"):
                manifest.write_bytes(b"\xff" * manifest.stat().st_size)
    with pytest.raises(DedupStoreError, match=r"is unreadable or corrupt .* move it aside"):
        _store(tmp_path)


def test_the_store_folder_of_any_peer_id_stays_under_the_root(tmp_path: Path) -> None:
    for peer in ("../x", "..", "a/b", "é d", "B"):
        p = store_path(tmp_path, peer)
        assert p.parent == tmp_path and p.name not in (".", "..") and "/" not in p.name
    assert store_path(tmp_path, "a/b") != store_path(tmp_path, "a%2Fb")


def test_the_setting_turns_it_on_and_the_option_wins(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDEMARK_PEER_DEDUP_DIR", raising=False)
    assert resolve_dedup_dir(None) == ""
    monkeypatch.setenv("TIDEMARK_PEER_DEDUP_DIR", str(tmp_path))
    assert resolve_dedup_dir(None) == str(tmp_path)
    assert resolve_dedup_dir("") == ""
    assert registry.env_value("peer_dedup_ttl") == DAY


def _env(mid: str, persistent: bool = True) -> Envelope:
    mt = message_type_of(Item)
    return Envelope(mid, "A", mt.name, mt.serializer.encode(Item(1)), 0, persistent, "test")


def test_decide_and_inbox_ack_a_completed_id_without_running_it(tmp_path: Path) -> None:
    handlers = HandlerRegistry()
    handlers.add(lambda m: None, Item)
    store = _store(tmp_path)
    store.record("done", 1)
    d = decide(_env("done"), Phase.NORMAL, "test", DedupWindow(10), handlers, store)
    assert (d.action, d.kind) == (DROP, "completed")
    assert decide(_env("new"), Phase.NORMAL, "test", DedupWindow(10), handlers,
                  store).action == RUN
    assert decide(_env("done"), Phase.NORMAL, "test", DedupWindow(10), handlers).action == RUN

    jobs, acked_while_stored = [], []
    stats: Counter[str] = Counter()
    inbox = Inbox("B", "test", handlers, DedupWindow(10), lambda k, j: jobs.append(j),
                  lambda *a: None, lambda e: acked_while_stored.append(
                      (e.message_id, e.message_id in store)), stats)
    inbox.completed, inbox.clock_ms = store, lambda: 7
    inbox.phase = Phase.NORMAL
    inbox.accept(_env("done"))
    inbox.accept(_env("done"))  # a second copy in this incarnation: a plain duplicate
    inbox.accept(_env("new"))
    inbox.accept(_env("transient", persistent=False))
    assert [j.env.message_id for j in jobs] == ["new", "transient"]
    assert acked_while_stored == [("done", True)]
    for j in jobs:
        j.run()
    # recorded before the ack is queued; a transient message is not recorded
    assert acked_while_stored[1:] == [("new", True), ("transient", False)]
    assert stats["completed_before"] == 1 and stats["duplicates"] == 1
    store.close()


def _crashing_bus(tmp_path: Path, persisted: bool) -> tuple[list[int], int]:
    """B is down while A sends 10; B's first replay crashes in the handler of the 6th
    (after 5 handlers returned, their acks still pending); B restarts. Returns the numbers
    B's handler completed, in order, and B's completed_before count."""
    opts = PeerOptions(ack_linger_ms=0, dedup_dir=str(tmp_path) if persisted else "")
    bus = TestBus(options=opts)
    a, b = bus.peer("A"), bus.peer("B")
    done: list[int] = []
    crash_at = [5]

    @b.handler
    def on(msg: Item, ctx: MessageContext) -> None:
        if msg.n == crash_at[0]:
            crash_at[0] = -1
            bus.crash("B")  # SimulatedCrash: this one did not complete
        done.append(msg.n)

    bus.crash("B")
    for n in range(10):
        a.send("B", Item(n))
    bus.restart("B")
    assert done == [0, 1, 2, 3, 4] and len(bus.unacked("B")) == 10  # acks lost in the crash
    b2 = bus.restart("B")
    assert not bus.unacked("B")
    return done, b2.stats.get("completed_before", 0)


def test_persisted_dedup_hands_no_completed_message_to_a_handler_twice(tmp_path: Path) -> None:
    done, skipped = _crashing_bus(tmp_path, persisted=True)
    assert done == list(range(10)) and skipped == 5
    # the control: without the store the five are handled a second time
    done, skipped = _crashing_bus(tmp_path / "unused", persisted=False)
    assert done == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9] and skipped == 0
    assert not (tmp_path / "unused").exists()


def test_peer_start_with_a_store_in_use_is_one_error_and_cleans_up(tmp_path: Path) -> None:
    settings = load_settings(env={}, bootstrap="127.0.0.1:1")  # never reached: fails first
    held = DedupStore.for_peer(tmp_path, "B", settings.environment, DAY, 10)
    try:
        peer = Peer("B", None, settings, PeerOptions(dedup_dir=str(tmp_path)))
        with pytest.raises(DedupStoreError, match="in use by another process"):
            peer.start()
        assert peer.phase is Phase.STOPPED and peer._core.dedup_store is None
    finally:
        held.close()
