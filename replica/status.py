"""The status document a node serves (``tidemark replica status --json``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.gossip.cluster_config import Epoch
from tidemark.gossip.node_state import NodeState

__all__ = ["StatusSnapshot", "build_status", "render_text"]


@dataclass(frozen=True)
class StatusSnapshot:
    """What a node knows, copied under its lock: the input of :func:`build_status`."""

    node_id: str
    epoch: Epoch
    states: Mapping[str, NodeState]
    seen_ago_s: Mapping[str, float]       # seconds since each node was last heard from
    down_after_s: float
    ust: Mapping[str, int]
    ust_ms: int
    gc_point: Mapping[str, int]
    log_end: Mapping[str, int]
    held: Mapping[str, Any] | None
    pins: Sequence[Mapping[str, Any]]     # GC pin leases (replica.replay.ReplayService.pin_rows)


def build_status(snap: StatusSnapshot) -> dict[str, Any]:
    """``{epoch, nodes, ust, ust_ms, gc_point, held_back_by, loss_ledger, lag, ...}``."""
    rows, losses = [], {}
    summaries: dict[str, dict[str, int]] = {}
    for nid, address in sorted(snap.epoch.nodes.items()):
        state = snap.states.get(nid)
        part = snap.epoch.partition_of(nid)
        up = nid == snap.node_id or snap.seen_ago_s.get(nid, 1e9) < snap.down_after_s
        partitions = {}
        for r in state.ranges if state else ():
            partitions[r.tp] = {"base": [r.base_start, r.base_end],
                                "detached": [list(d) for d in r.detached],
                                "log_end": r.log_end}
        for raw in state.losses if state else ():
            entry = json.loads(raw)
            if entry.get("summary"):  # the ledger is longer than what is gossiped
                summaries[str(entry.get("node", nid))] = {"entries": entry["entries"],
                                                          "offsets": entry["offsets"]}
            else:
                losses[raw] = entry
        rows.append({"id": nid, "address": address, "up": up, "partitions": partitions,
                     "partition": part.name if part else None,
                     "role": "joining" if part and nid in part.joining else "replica",
                     "caught_up": bool(state and state.caught_up),
                     "backfill": state.backfill if state else ""})
    return {"epoch": snap.epoch.epoch, "node": snap.node_id, "nodes": rows,
            "ust": dict(sorted(snap.ust.items())), "ust_ms": snap.ust_ms,
            "gc_point": dict(sorted(snap.gc_point.items())),
            "held_back_by": dict(snap.held) if snap.held else None,
            "loss_ledger": sorted(losses.values(), key=lambda e: (e["detected_ms"], e["node"])),
            "loss_summary": summaries,
            "lag": {tp: max(0, snap.log_end.get(tp, 0) - o) for tp, o in sorted(snap.ust.items())},
            "pins": [dict(p) for p in snap.pins]}


def render_text(doc: dict[str, Any]) -> str:
    """A human-readable rendering of a status document."""
    lines = [f"epoch {doc['epoch']} (answered by {doc['node']})"]
    for n in doc["nodes"]:
        state = "up" if n["up"] else "DOWN"
        extra = f" backfill {n['backfill']}" if n.get("backfill") else ""
        lines.append(f"  {n['id']:<8} {n['address']:<22} {state:<5} {n['role']}{extra}")
        for tp, p in sorted(n["partitions"].items()):
            det = f" detached {p['detached']}" if p["detached"] else ""
            lines.append(f"      {tp:<10} base {p['base']} log_end {p['log_end']}{det}")
    lines.append("ust:      " + " ".join(f"{tp}={o}" for tp, o in doc["ust"].items()))
    lines.append("gc_point: " + " ".join(f"{tp}={o}" for tp, o in doc["gc_point"].items()))
    held = doc["held_back_by"]
    lines.append("held back by: " + (f"{held['node']} for {held['seconds']:.1f}s" if held
                                      else "nobody"))
    for p in doc.get("pins", []):
        lines.append(f"pin {p['pin'][:8]} of {p['owner'] or '?'} at {p['barrier']}, expires in "
                     f"{p['expires_in_s']:.1f}s" + (f", replay {p['replay']['state']}"
                                                    if p.get("replay") else ""))
    lines.append(f"loss ledger: {len(doc['loss_ledger'])} entr"
                 f"{'y' if len(doc['loss_ledger']) == 1 else 'ies'}")
    for node, total in sorted(doc.get("loss_summary", {}).items()):
        lines.append(f"  {node}: {total['entries']} entries, {total['offsets']} offsets in all "
                     f"(the newest are listed)")
    for e in doc["loss_ledger"]:
        lines.append(f"  {e['topic']}/{e['partition']} [{e['start']}, {e['end']}) "
                     f"spliced by {e['node']} in epoch {e['epoch']}")
    ledger = doc.get("deadletter_ledger") or []
    if ledger:
        lines.append(f"dead letters Kafka refused (kept in {doc['node']}'s store): {len(ledger)}")
        for e in ledger[:10]:
            lines.append(f"  {e['topic']}/{e['partition']}@{e['offset']} ({e['size']} bytes): "
                         f"{e['reason']} / {e['error']}")
    return "\n".join(lines)
