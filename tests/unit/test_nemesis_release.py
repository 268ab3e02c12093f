"""The checker's ``release`` verdict on hand-made histories: a Send released after its Ack
below the node's GC point passes; one released unacked, acked too late, or above the GC
point fails and is named; a released offset that is not a recorded Send is unknown. And a
``floor`` (where holdings start, for systems that release one record at a time below the
GC point) is what the cut check judges holdings from."""

from __future__ import annotations

from tidemark.nemesis import (
    Final,
    FinalPartition,
    History,
    PartitionSample,
    Sample,
    SendAck,
    check_cut,
    check_release,
)


def _history(released: tuple[int, ...], gc: int | None) -> History:
    h = History(owners={0: ["n1"]},
                acks={0: [SendAck(1, "a", 3), SendAck(2, "b", None), SendAck(4, "c", 9)]})
    h.final = Final(nodes={"n1": {0: FinalPartition(((0, 10),), "d", released, gc)}})
    return h


def test_a_send_released_after_its_ack_below_the_gc_point_passes() -> None:
    v = check_release(_history((1,), 5))
    assert v.ok and v.checked == 1


def test_releases_before_the_ack_or_past_the_gc_point_are_named() -> None:
    v = check_release(_history((2,), 5))
    assert not v.ok and v.first is not None and v.first.startswith("txlog/0@2: Send b")
    assert "never acked" in v.first
    v = check_release(_history((4,), 8))  # acked at 9, GC point 8
    assert not v.ok and v.first is not None and "acked at 9" in v.first
    v = check_release(_history((1,), 1))  # the Send itself is not below the GC point
    assert not v.ok and v.first is not None and v.first.startswith("txlog/0@1")


def test_unknown_offsets_or_gc_points_are_unknown_not_violations() -> None:
    v = check_release(_history((7,), 5))
    assert v.ok and v.unknown == 1 and v.checked == 0
    v = check_release(_history((1,), None))
    assert v.ok and v.unknown == 1


def test_the_cut_is_judged_from_the_floor_when_one_is_given() -> None:
    held = ((40, 100),)
    claim = Sample(1000, "n1", {0: PartitionSample(held, cut=100, gc_point=None, floor=40)})
    assert check_cut(History(owners={0: ["n1"]}, samples=[claim])).ok
    no_floor = Sample(1000, "n1", {0: PartitionSample(held, cut=100)})
    v = check_cut(History(owners={0: ["n1"]}, samples=[no_floor]))
    assert not v.ok and v.first is not None and v.first.startswith("txlog/0@0")
