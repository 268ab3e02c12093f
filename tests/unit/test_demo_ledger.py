"""The demo's ground truth: the fsync'ed ledger and the sent/handled tally."""

from __future__ import annotations

import threading
from pathlib import Path

from tidemark.demo.ledger import Handled, Ledger, incarnation_tally, read_handled, tally


def h(mid: str, n: int, replay: bool = False, sender: str = "A", inc: str = "inc") -> Handled:
    return Handled(mid, sender, "tick", n, replay, inc)


def test_ledger_applies_each_id_once_across_incarnations(tmp_path: Path) -> None:
    path = tmp_path / "B.ledger"
    first = Ledger(path)
    assert first.record(h("m1", 0)) and first.record(h("m2", 1))
    assert not first.record(h("m1", 0))
    # a killed process: no close; the next incarnation reads what was synced
    second = Ledger(path)
    assert not second.record(h("m2", 1, replay=True))
    assert second.record(h("m3", 2, replay=True))
    second.close()
    assert [x.message_id for x in read_handled(path)] == ["m1", "m2", "m3"]
    assert second.redelivered == 1 and first.redelivered == 1


def test_ledger_concurrent_records_are_all_written(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "B.ledger")

    def work(k: int) -> None:
        for i in range(200):
            ledger.record(h(f"{k}-{i}", i, sender=str(k)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ledger.close()
    assert len({x.message_id for x in read_handled(tmp_path / "B.ledger")}) == 800


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "B.ledger"
    path.write_text("m1\tA\ttick\t0\t0\tinc\nm2\tA\ttic")
    assert [x.message_id for x in read_handled(path)] == ["m1"]


def test_tally_counts_lost_twice_live_and_order() -> None:
    sent = {"A": [("a0", "tick", 0), ("a1", "tick", 1), ("a2", "tick", 2)],
            "C": [("c0", "tick", 0)]}
    handled = [h("a0", 0), h("a2", 2, True), h("a1", 1, True), h("a0", 0, True),
               h("c0", 0, sender="C"), h("zz", 9, sender="Z")]
    t = tally(sent, handled)
    assert t.sent == 4 and t.handled == 6
    assert t.lost == [] and t.twice == ["a0"] and t.unexpected == 1
    assert t.live == 3 and t.from_log == 3
    assert t.out_of_order == 2  # a1 after a2, a0 again after a2
    assert tally(sent, handled[:2]).lost == ["a1", "c0"]


def test_summary_table_shows_every_count_and_the_verdict() -> None:
    from tidemark.demo.report import render
    r = {"sent": 10, "sent_by": {"A": {"ticks": 9, "notes": 1}}, "handled": 10,
         "delivered_live": 4, "handled_from_log": 6, "replayed": 5, "forwarded": 1,
         "replay_duplicates_dropped": 0, "duplicates_dropped": 2, "redelivered_after_kill": 1,
         "deadlettered": None, "lost": 0, "lost_ids": [], "handled_twice": 0,
         "out_of_order": 0, "unexpected": 0,
         "replay": {"barrier": 7, "partition": 1, "nodes": ["p1r0"], "retries": 0,
                    "replay_ms": 12.5, "handover_ms": 3.0, "handover_target": 9},
         "stable_cut": {"txlog/1": 9}, "gc_point": {"txlog/1": 7}, "status_error": None,
         "queue_depths": {"B": 0, "total": 0}, "folder": "/x", "ok": True}
    text = render(r)
    for needle in ("sent (confirmed in txlog)", "delivered live", "replayed (B2", "forwarded",
                   "duplicates dropped", "dead-lettered", "LOST", "stable cut (UST)",
                   "txlog/1=9", "GC point", "txlog/1=7", "queue depth", "PASS"):
        assert needle in text, needle
    assert "FAIL" in render({**r, "ok": False, "lost": 1, "lost_ids": ["m"]})


def test_ledger_keeping_repeats_writes_every_call(tmp_path: Path) -> None:
    path = tmp_path / "B.ledger"
    first = Ledger(path, keep_repeats=True)
    assert first.record(h("m1", 0, inc="i1"))
    second = Ledger(path, keep_repeats=True)
    assert not second.record(h("m1", 0, True, inc="i2"))  # a repeat: written, counted
    second.close()
    assert [(x.message_id, x.incarnation) for x in read_handled(path)] == [("m1", "i1"),
                                                                        ("m1", "i2")]
    assert second.redelivered == 1


def test_incarnation_tally_tells_redelivery_after_a_crash_from_violations() -> None:
    sent = {"A": [(f"a{i}", "tick", i) for i in range(6)]}
    handled = [h("a0", 0, inc="i1"), h("a1", 1, inc="i1"), h("a2", 2, inc="i1"),
               # i1 killed: a1 and a2 handled again (a1's ack was in txlog, a2's not)
               h("a1", 1, True, inc="i2"), h("a2", 2, True, inc="i2"), h("a3", 3, True, inc="i2"),
               h("a4", 4, inc="i2"), h("a4", 4, inc="i2")]  # twice in one incarnation
    t = incarnation_tally(sent, handled, killed={"i1"}, acked={"a0", "a1"})
    assert t["lost"] == 1 and t["lost_ids"] == ["a5"]
    assert t["redelivered_after_crash"] == 1  # a2
    assert t["twice_after_ack"] == 1 and t["twice_same_incarnation"] == 1
    assert t["applied_twice"] == 2 and t["twice_ids"] == ["a1", "a4"]
    assert t["out_of_order"] == 0  # i2 starting over at a1 is no disorder
    assert t["handled"] == 5 and t["handled_calls"] == 8 and t["sent"] == 6
    again = incarnation_tally(sent, handled + [h("a3", 3, inc="i2")], {"i1"}, set())
    assert again["out_of_order"] == 1 and again["twice_same_incarnation"] == 2
    # handled again after an incarnation that stopped cleanly: a violation
    clean = incarnation_tally(sent, [h("a0", 0, inc="i1"), h("a0", 0, inc="i2")], set(), set())
    assert clean["applied_twice"] == 1 and clean["redelivered_after_crash"] == 0
