"""Durability bookkeeping (:class:`tidemark.peer_client.confirmations.Confirmations`) against a model:
a wait completes exactly once, only when its level holds by the reports so far (``quorum``:
a majority of the partition's replicas applied it; ``all``: every replica applied it, or
some replica's stable cut covers it) or its deadline passed, and every wait that holds is
settled."""

from __future__ import annotations

from hypothesis import example, given, settings
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
    _check(steps, via_wait=False)


@settings(max_examples=400, deadline=None)
@given(ops, st.booleans())
# a report after the last pending wait of a level settled: the next wait must see it
@example([("wait", "quorum", 0, 0, 9), ("report", "a", 0, 5, 0), ("report", "b", 0, 5, 0),
          ("report", "a", 0, 10, 0), ("report", "b", 0, 10, 0), ("wait", "quorum", 0, 7, 9)],
         False)
def test_a_wait_the_reports_hold_already_completes_at_once(steps: list, settle: bool) -> None:
    """``Confirmations.wait`` (the peer's path): True exactly when the reports so far hold
    the send, which then is not kept; else it settles like :meth:`add`'s (with or without a
    settle after every step, so its cached ends are checked against reports alone too)."""
    _check(steps, via_wait=True, settle_each=settle)


def _check(steps: list, via_wait: bool, settle_each: bool = True) -> None:
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
            done = (lambda e, i=i: outcome[i].append(e))  # noqa: E731
            if not via_wait:
                book.add(level, k, offset, now + ttl, done)
            elif book.wait(level, k, offset, now + ttl, done, OWNERS[k]):
                assert _holds(model, level, k, offset), "completed before it held"
                done(None)
            else:
                assert not _holds(model, level, k, offset), "kept though it held"
        elif step[0] == "report":
            _, node, k, applied, stable = step
            old = model.get((node, k), (0, 0))
            model[(node, k)] = (max(old[0], applied), max(old[1], stable))
            book.report(node, {k: (applied, stable)})
        else:
            now += step[1]
            for _, _, w in book.expire(now):
                w.done("expired")
        if settle_each or step[0] == "report":
            for ready in book.settle(OWNERS, OWNERS):
                ready(None)
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
