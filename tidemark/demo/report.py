"""The demo's summary table (pure: a result document in, text out)."""

from __future__ import annotations

from typing import Any

__all__ = ["render"]


def _cut(d: dict[str, int] | None) -> str:
    """Non-zero partitions of a cut (``txlog/4=18860``), then how many are at 0."""
    if not d:
        return "-"
    items = sorted(d.items(), key=lambda kv: (kv[0].split("/")[0], int(kv[0].split("/")[-1])
                                              if kv[0].split("/")[-1].isdigit() else 0))
    shown = " ".join(f"{tp}={o}" for tp, o in items if o)
    zeros = sum(1 for _, o in items if not o)
    return (shown + (f" (+{zeros} at 0)" if zeros else "")).strip() or f"all {zeros} at 0"


def render(r: dict[str, Any]) -> str:
    """The summary of :func:`tidemark.demo.scenario.run_demo` as a table."""
    by = ", ".join(f"{n}: {v['ticks']} ticks + {v['notes']} notes"
                   for n, v in sorted(r["sent_by"].items()))
    rp = r["replay"]
    dl = "-" if r["deadlettered"] is None else str(r["deadlettered"])
    rows = [
        ("sent (confirmed in txlog)", f"{r['sent']}  ({by})"),
        ("handled by B (ledger)", str(r["handled"])),
        ("  delivered live", str(r["delivered_live"])),
        ("  from the log (replay or forward)", str(r["handled_from_log"])),
        ("replayed (B2, after dedup)", f"{r['replayed']}  (barrier txlog/{rp['partition']}@"
                                       f"{rp['barrier']}, {rp['replay_ms']} ms, from"
                                       f" {', '.join(rp['nodes'] or []) or '-'},"
                                       f" {rp['retries']} retries)"),
        ("forwarded during handover", f"{r['forwarded']}  (handover {rp['handover_ms']} ms,"
                                      f" to txlog offset {rp['handover_target']})"),
        ("duplicates dropped (peer dedup)", f"{r['duplicates_dropped']}  (of them in replay:"
                                            f" {r['replay_duplicates_dropped']})"),
        ("handled by B1, ack lost in the kill", f"{r.get('completed_before_kill', 0)}  (acked"
                                                 f" by B2 without a handler call: persisted"
                                                 f" dedup)"),
        ("  reached B2's handler anyway", f"{r['redelivered_after_kill']}  (skipped by the"
                                          f" handler's ledger; killed between return and"
                                          f" dedup record)"),
        ("dead-lettered", dl),
        ("LOST", str(r["lost"]) + (f"  e.g. {r['lost_ids'][:3]}" if r["lost"] else "")),
        ("applied twice", str(r["handled_twice"])),
        ("out of per-sender order", str(r["out_of_order"])),
        ("stable cut (UST)", _cut(r["stable_cut"])),
        ("GC point", _cut(r["gc_point"])),
        ("queue depth", f"B {r['queue_depths']['B']}, all peers"
                        f" {r['queue_depths']['total']}"),
    ]
    if r.get("status_error"):
        rows.append(("replica status", r["status_error"]))
    width = max(len(k) for k, _ in rows)
    lines = [f"  {k:<{width}}  {v}" for k, v in rows]
    verdict = ("PASS: lost = 0, nothing applied twice, in order, missed messages came back"
               " from the log" if r["ok"] else
               "FAIL: lost > 0, something applied twice, out of order, or nothing came back"
               " from the log")
    return "\n".join(["", "== summary", *lines, "", verdict, f"(files in {r['folder']})"])
