"""The directory cache against a dict model: register, heartbeat, unregister, expiry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.peer_client.directory import DirectoryCache, needs_probe

ENV, DEAD = "test", 1000
PEERS = ["a", "b", "c"]


class Model:
    """The rules, written plainly."""

    def __init__(self) -> None:
        self.entries: dict[str, dict] = {}
        self.foreign: dict[str, str] = {}
        self.believed: set[str] = set()

    def apply(self, key: str, rec: dict | None) -> None:
        if rec is None:
            self.entries.pop(key, None)
            self.foreign.pop(key, None)
            self.believed.discard(key)
        elif rec["environment"] != ENV:
            if key not in self.entries:
                self.foreign[key] = rec["environment"]
        elif key in self.entries and not rec["up"] \
                and rec["incarnation"] != self.entries[key]["incarnation"]:
            pass
        else:
            self.entries[key] = rec
            self.foreign.pop(key, None)

    def alive(self, key: str, now: int) -> bool:
        e = self.entries.get(key)
        return e is not None and e["up"] and now - e["timestamp_ms"] <= DEAD

    def expire(self, now: int) -> list[str]:
        alive = {k for k in self.entries if self.alive(k, now)}
        gone = sorted(self.believed - alive)
        self.believed = alive
        return gone


ops = st.lists(st.one_of(
    st.tuples(st.just("register"), st.sampled_from(PEERS), st.sampled_from(["i1", "i2", "i3"]),
              st.sampled_from([ENV, ENV, "prod"]),
              st.frozensets(st.sampled_from(["x.A", "x.B"]))),
    st.tuples(st.just("heartbeat"), st.sampled_from(PEERS)),
    st.tuples(st.just("down"), st.sampled_from(PEERS), st.sampled_from(["i1", "i2", "i3"])),
    st.tuples(st.just("tombstone"), st.sampled_from(PEERS)),
    st.tuples(st.just("advance"), st.integers(0, 1500)),
    st.tuples(st.just("expire"),),
), max_size=60)


def _rec(peer: str, inc: str, env: str, up: bool, subs: frozenset, ts: int) -> dict:
    return {"peer_id": peer, "environment": env, "endpoint": f"h:{peer}", "up": up,
            "persistent": True, "subscriptions": sorted(subs), "timestamp_ms": ts,
            "incarnation": inc}


@settings(max_examples=300, deadline=None)
@given(ops)
def test_cache_matches_model(sequence: list) -> None:
    cache, model, now = DirectoryCache(ENV, DEAD), Model(), 0
    for op in sequence:
        if op[0] == "register":
            _, p, inc, env, subs = op
            rec = _rec(p, inc, env, True, subs, now)
            cache.apply(p, dict(rec))
            model.apply(p, rec)
        elif op[0] == "heartbeat" and op[1] in model.entries:
            old = model.entries[op[1]]
            rec = {**old, "timestamp_ms": now}
            cache.apply(op[1], dict(rec))
            model.apply(op[1], rec)
        elif op[0] == "down":
            _, p, inc = op
            rec = _rec(p, inc, ENV, False, frozenset(), now)
            cache.apply(p, dict(rec))
            model.apply(p, rec)
        elif op[0] == "tombstone":
            cache.apply(op[1], None)
            model.apply(op[1], None)
        elif op[0] == "advance":
            now += op[1]
        elif op[0] == "expire":
            assert cache.expire(now) == model.expire(now)
        for p in PEERS:
            entry, want = cache.get(p), model.entries.get(p)
            assert (entry is None) == (want is None)
            if want is not None:
                assert entry.to_record() == {**want, "subscriptions": sorted(want["subscriptions"])}
            assert cache.is_alive(p, now) == model.alive(p, now)
            assert cache.foreign_environment(p) == model.foreign.get(p)
        for t in ("x.A", "x.B"):
            assert [e.peer_id for e in cache.subscribers(t)] == sorted(
                k for k, v in model.entries.items() if t in v["subscriptions"])


@given(st.integers(0, 3000), st.booleans(), st.sampled_from(["me", "other"]))
def test_needs_probe_only_for_a_live_other_incarnation(age: int, up: bool, inc: str) -> None:
    cache = DirectoryCache(ENV, DEAD)
    cache.apply("a", _rec("a", inc, ENV, up, frozenset(), 0))
    assert needs_probe(cache.get("a"), "me", age, DEAD) == (up and inc == "other" and age <= DEAD)
    assert not needs_probe(None, "me", age, DEAD)


def test_records_of_another_environment_are_rejected_with_a_reason() -> None:
    cache = DirectoryCache(ENV, DEAD)
    out = cache.apply("p", _rec("p", "i", "prod", True, frozenset(), 0))
    assert out.kind == "rejected" and "prod" in out.reason and ENV in out.reason
    assert cache.get("p") is None and cache.foreign_environment("p") == "prod"
    assert cache.apply("q", _rec("p", "i", ENV, True, frozenset(), 0)).kind == "rejected"
