"""The status document a node serves (``tidemark replica status --json``)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replica.node import Node

__all__ = ["build_status", "render_text"]


def build_status(node: "Node") -> dict[str, Any]:
    """``{epoch, nodes, ust, ust_ms, gc_point, held_back_by, loss_ledger, lag, ...}``."""
    now = time.monotonic()
    down_after = node.cf.down_after_ms / 1000
    with node.lock:
        epoch = node.epoch
        rows, losses = [], {}
        for nid, address in sorted(epoch.nodes.items()):
            state = node.states.get(nid)
            part = epoch.partition_of(nid)
            up = nid == node.node_id or now - node.last_seen.get(nid, -1e9) < down_after
            partitions = {}
            for r in (state or {}).get("ranges", []):
                partitions[f"{r['topic']}/{r['partition']}"] = {
                    "base": [r["base_start"], r["base_end"]],
                    "detached": [[d["start"], d["end"]] for d in r["detached"]],
                    "log_end": r["log_end"]}
            for raw in (state or {}).get("losses", []):
                losses[raw] = json.loads(raw)
            rows.append({"id": nid, "address": address, "up": up, "partitions": partitions,
                         "partition": part.name if part else None,
                         "role": "joining" if part and nid in part.joining else "replica",
                         "caught_up": bool(state and state.get("caught_up")),
                         "backfill": (state or {}).get("backfill", "")})
        ust, gc = dict(node.ust), dict(node.gc_point)
        log_end = dict(getattr(node, "log_end", {}))
        held = dict(node.held) if node.held else None
        pins = len(node.pins)
    return {"epoch": epoch.epoch, "node": node.node_id, "nodes": rows,
            "ust": dict(sorted(ust.items())), "ust_ms": node.ust_ms,
            "gc_point": dict(sorted(gc.items())), "held_back_by": held,
            "loss_ledger": sorted(losses.values(), key=lambda e: (e["detected_ms"], e["node"])),
            "lag": {tp: max(0, log_end.get(tp, 0) - o) for tp, o in sorted(ust.items())},
            "pins": pins}


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
    lines.append(f"loss ledger: {len(doc['loss_ledger'])} entr"
                 f"{'y' if len(doc['loss_ledger']) == 1 else 'ies'}")
    for e in doc["loss_ledger"]:
        lines.append(f"  {e['topic']}/{e['partition']} [{e['start']}, {e['end']}) "
                     f"spliced by {e['node']} in epoch {e['epoch']}")
    return "\n".join(lines)
