"""Which printed targets a bench's result missed: the decision behind ``tidemark bench ...
--check`` (:func:`tidemark.options.bench_exit` turns a non-empty list into exit code 3).

One pure function per bench, from its result (the document ``--json`` prints) to the
targets it missed, one phrase each; empty: it met every target it prints. Each reads the same
fields, with the same comparison, as the bench's own "meets"/"BELOW"/"MISSES" verdict. A
security comparison that ran (``security_met`` true or false) counts as a target; one that
did not run (``--no-security-compare``, ``security_met`` null) does not.
"""

from __future__ import annotations

from typing import Any

__all__ = ["produce", "send", "stable", "ingest", "gc", "queues", "replay", "catchup"]


def _below(name: str, value: Any, target: Any) -> list[str]:
    """``name`` missed ``value >= target`` (a missing value misses)."""
    return [] if value is not None and value >= target else [f"{name} {value} < {target}"]


def _security(r: dict[str, Any]) -> list[str]:
    if r.get("security_met") is False:
        return [f"security_ratio {r.get('security_ratio')} < {r.get('security_target_ratio')}"]
    return []


def produce(r: dict[str, Any]) -> list[str]:
    """``bench produce``: LogProducer / raw ratio >= ``target_ratio``."""
    return _below("ratio", r.get("ratio"), r["target_ratio"])


def send(r: dict[str, Any]) -> list[str]:
    """``bench send``: Peer.post / raw ratio >= ``target_ratio``; the security ratio."""
    return _below("ratio", r.get("ratio"), r["target_ratio"]) + _security(r)


def stable(r: dict[str, Any]) -> list[str]:
    """``bench stable``: send->stable p99 <= ``target_p99_ms`` and <= ``target_ratio_p99``
    times the raw producer's p99 in the same run; the security ratio."""
    p99, target = r.get("stable_p99_ms"), r["target_p99_ms"]
    late = [] if p99 is not None and p99 <= target else [f"stable p99 {p99} ms > {target} ms"]
    ratio, most = r.get("ratio_p99"), r.get("target_ratio_p99")
    if most is not None and (ratio is None or ratio > most):
        late.append(f"stable p99 {ratio} x the raw producer's > {most} x")
    return late + _security(r)


def ingest(r: dict[str, Any]) -> list[str]:
    """``bench ingest``: node ingest >= ``target_tx_per_s``."""
    return _below("node ingest tx/s", r.get("node_tx_per_s"), r["target_tx_per_s"])


def gc(r: dict[str, Any]) -> list[str]:
    """``bench gc``: ``met`` (ratio >= ``target_ratio`` at both minimum ages)."""
    if r.get("met"):
        return []
    ratios = {k: r[k]["ratio"] for k in ("gc_min_age_0", "gc_min_age_24h") if k in r}
    return [f"GC ratio {ratios} below {r.get('target_ratio')} at a minimum age"]


def queues(r: dict[str, Any]) -> list[str]:
    """``bench queues``: send->queue p99 < ``p99_target_s`` (a missing p99 misses, as the
    report's verdict) and, when the run gives one, the job's ratio to the plain consumer
    >= ``target_ratio``."""
    p99 = (r.get("latency") or {}).get("p99_s", 1e9)
    target = r.get("p99_target_s", 2)
    late = [] if p99 < target else [f"send->queue p99 {p99} s >= {target} s"]
    ratio, least = (r.get("throughput") or {}).get("ratio"), r.get("target_ratio")
    if least is not None and (ratio is None or ratio < least):
        late.append(f"job {ratio} x the plain consumer < {least} x")
    return late


def replay(r: dict[str, Any]) -> list[str]:
    """``bench replay``: msgs/s >= ``target_msgs_per_s``, ratio >= ``target_ratio``; the
    security ratio."""
    machine = ((r.get("cpu") or {}).get("us_per_msg") or {}).get("machine")
    over = r.get("target_machine_us_per_msg")
    return (_below("replay msgs/s", r.get("peer_msgs_per_s"), r["target_msgs_per_s"])
            + _below("ratio", r.get("ratio") or 0, r["target_ratio"])
            + (_below("ratio to the user's loop", r.get("user_loop_ratio") or 0,
                      r["target_user_loop_ratio"]) if "target_user_loop_ratio" in r else [])
            + ([f"machine CPU {machine} us per message > {over}"]
               if over is not None and (machine is None or machine > over) else [])
            + _security(r))


def catchup(r: dict[str, Any]) -> list[str]:
    """``bench catchup``: the misses the run itself lists (time to normal, held-back bound,
    nothing lost or applied twice)."""
    return [str(m) for m in r.get("misses") or ()]
