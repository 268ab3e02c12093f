"""Durability bookkeeping (:class:`tidemark.peer_client.confirmations.Confirmations`) against a model:
a wait completes exactly once, only when its level holds by the reports so far (``quorum``:
a majority of the partition's replicas applied it; ``all``: every replica applied it, or
some replica's stable cut covers it) or its deadline passed, and every wait that holds is
settled."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.confirmations import Confirmations

OWNERS = {0: ["a", "b"], 1: ["a", "b", "c"]}

ops = st.lists(st.one_of(
    st.tuples(st.just("wait"), st.sampled_from(["quorum", "all"]), st.sampled_from([0, 1]),
              st.integers(0, 30), st.integers(1, 20)),
    st.tuples(st.just("report"), st.sampled_from(["a", "b", "c"]), st.sampled_from([0, 1]),
              st.integers(0, 32), st.integers(0, 32)),
    st.tuples(st.just("tick"), st.integers(0, 5))), max_size=80)


def _holds(model: dict, level: str, k: int, offset: int) -> bool:
    owners = OWNERS[k]
    if level == "quorum":
        return sum(model.get((n, k), (0, 0))[0] > offset for n in owners) > len(owners) // 2
    return (all(model.get((n, k), (0, 0))[0] > offset for n in owners)
            or any(model.get((n, k), (0, 0))[1] > offset for n in owners))


@settings(max_examples=400, deadline=None)
@given(ops)
def test_waits_settle_exactly_when_the_model_says(steps: list) -> None:
    book = Confirmations()
    model: dict[tuple[str, int], tuple[int, int]] = {}  # (node, k) -> highest reported ends
    now = 0
    outcome: dict[int, list] = {}  # wait number -> what its callbacks received
    waits: list[tuple[str, int, int, int]] = []  # (level, k, offset, deadline)
    for step in steps:
        if step[0] == "wait":
            _, level, k, offset, ttl = step
            i = len(waits)
            waits.append((level, k, offset, now + ttl))
            outcome[i] = []
            book.add(level, k, offset, now + ttl, lambda e, i=i: outcome[i].append(e))
        elif step[0] == "report":
            _, node, k, applied, stable = step
            old = model.get((node, k), (0, 0))
            model[(node, k)] = (max(old[0], applied), max(old[1], stable))
            book.report(node, {k: (applied, stable)})
        else:
            now += step[1]
            for _, _, w in book.expire(now):
                w.done("expired")
        for done in book.settle(OWNERS, OWNERS):
            done(None)
        for i, (level, k, offset, deadline) in enumerate(waits):
            got = outcome[i]
            assert len(got) <= 1, "a wait completed twice"
            if got == [None]:
                assert _holds(model, level, k, offset)
            elif got == ["expired"]:
                assert deadline <= now
            else:  # still pending: neither holds nor expired
                assert not _holds(model, level, k, offset)
                assert deadline > now or step[0] != "tick"
    assert len(book) == sum(1 for got in outcome.values() if not got)
