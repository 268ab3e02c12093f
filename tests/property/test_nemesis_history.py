"""The run history round-trips through its dict, JSON and JSON lines forms."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.nemesis_model import simulate
from tidemark.nemesis.checker import check
from tidemark.nemesis.history import (
    Confirmed,
    Event,
    History,
    HistoryLog,
    SendAck,
    history_from_lines,
    read_history,
)

names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
details = st.dictionaries(st.text(max_size=5), st.one_of(
    st.integers(-2**40, 2**40), st.text(max_size=5), st.booleans(), st.none(),
    st.lists(st.integers(0, 9), max_size=3)), max_size=3)


@st.composite
def histories(draw: st.DrawFn) -> History:
    h = simulate(draw(st.randoms(use_true_random=False)), seed=draw(st.integers(0, 2**32)))
    h.events += [Event(draw(st.integers(0, 10**12)), draw(names), draw(details))
                 for _ in range(draw(st.integers(0, 3)))]
    for sender in draw(st.lists(names, max_size=2)):
        h.confirmed.setdefault(sender, []).append(Confirmed(draw(names), draw(st.integers())))
    return h


@settings(max_examples=200, deadline=None)
@given(histories())
def test_dict_and_json_round_trip(h: History) -> None:
    d = h.to_dict()
    again = History.from_dict(json.loads(json.dumps(d)))
    assert again == h
    assert again.to_dict() == d
    assert check(again).to_dict() == check(h).to_dict()


def without_empty_lists(h: History) -> History:
    """What JSON lines can say: a sender, recipient or partition with no rows is absent."""
    d = h.to_dict()
    for key in ("confirmed", "handled", "acks"):
        d[key] = {k: v for k, v in d[key].items() if v}
    return History.from_dict(d)


@settings(max_examples=100, deadline=None)
@given(histories())
def test_json_lines_round_trip(h: History) -> None:
    assert history_from_lines(h.to_lines()) == without_empty_lists(h)


def test_history_log_appends_and_reads_back(tmp_path: Path) -> None:
    h = simulate(random.Random(7), seed=7)
    log = HistoryLog(tmp_path / "history.jsonl")
    log.write_history(h)
    assert read_history(log.path) == without_empty_lists(h)
    assert read_history(log.path).seed == 7
    # a Send appended again once acked replaces the earlier line
    log.send(99, SendAck(3, "m", None, None))
    log.send(99, SendAck(3, "m", 8, 1234))
    log.event(5, "partition", nodes=["n0"], seed=None)
    back = read_history(log.path)
    assert back.acks[99] == [SendAck(3, "m", 8, 1234)]
    assert back.events[-1] == Event(5, "partition", {"nodes": ["n0"], "seed": None})
