#!/usr/bin/env bash
# `make bench`: every benchmark on an empty local stack of its own, each beside its raw
# baseline. The stack lives in its own state folder (not the demo's ./.tidemark), which is
# removed before and after, so nothing an earlier `make demo` left running is restarted.
# Set BENCH_ARGS="--json" to get machine-readable figures. bench send, stable and replay
# measure mutual TLS beside --insecure in the same run (security_ratio, target >= 0.9); set
# BENCH_SECURITY=0 to skip that comparison for a quicker run (docs/benchmarks.md says how much).
set -euo pipefail
cd "$(dirname "$0")/.."
T=.venv/bin/tidemark
export TIDEMARK_STATE_DIR="$PWD/.tidemark-bench"
unset TIDEMARK_BOOTSTRAP
cleanup() { $T local down >/dev/null 2>&1 || true; rm -rf "$TIDEMARK_STATE_DIR"; }
cleanup
trap cleanup EXIT
$T local up --brokers 3 >/dev/null
echo "== stack: $($T local status --json | .venv/bin/python -c 'import json,sys; s=json.load(sys.stdin); print(len(s["brokers"]), "brokers,", len(s["replicas"]), "replicas, spark:", "running" if s["spark"] else "none", "- started by this bench in", s["state_dir"])')"
echo "== machine: $(nproc) cores, load average $(cut -d" " -f1-3 /proc/loadavg)"
# Before each bench: wait (up to 2 min) until the machine is quiet - the brokers' JIT after the
# start, the replicas still ingesting the previous bench's records - and print how busy it was.
settle() { echo "-- before this bench, machine $($T local settle --timeout 120 2>/dev/null | sed 's/^machine //')"; }
# run TITLE BENCH ARGS...: a heading, the settle line, then `tidemark bench BENCH ARGS...`.
run() { echo; echo "== $1"; settle; shift; $T bench "$@" ${BENCH_ARGS:-}; }
SECURITY=""; [ "${BENCH_SECURITY:-1}" = 0 ] && SECURITY="--no-security-compare"
run "bench produce (LogProducer vs raw producer, target ratio >= 0.9)" produce
run "bench send (Peer.post durability log vs raw producer, target ratio >= 0.9; Peer.post_many beside the raw producer with keys in the same runs; TLS vs --insecure, target >= 0.9)" send $SECURITY
run "bench ingest (target >= 100k transactions/s per node)" ingest
run "bench gc (ingest with GC running on a 1M-record store vs without, minimum age 0 and 24 h; target ratio >= 0.8)" gc
run "bench queues (targets send->queue p99 <= 2 s at 2000 msgs/s, job >= 0.3 x a plain consumer)" queues
run "bench queues --step (the job's step per message: single Acks vs signed AckBatches, same messages; no target)" queues --step
run "bench queues --backlog 1000000 (a down peer's 1M backlog; targets p99 <= 2 s for the others, job >= 0.3 x a plain consumer)" queues --backlog 1000000
$T local up --replicas 2x2 >/dev/null
run "bench stable (send->stable at durability all, 10k msgs/s, targets p99 <= 100 ms and <= 4 x the raw
   acks=all producer's p99, which runs a round beside each counted round; replicas 2x2 added;
   TLS vs --insecure, the replica nodes restarted plaintext and back, target >= 0.9)" stable $SECURITY
run "bench replay (a 1M backlog replayed into a Peer's handler beside a raw consumer of the same
   queue records and the loop a user writes without Tidemark; targets >= 100k msgs/s, >= 0.4 x
   raw, >= 2 x the user's loop, <= 8 us of machine CPU per message; replica RSS sampled; then
   replays acking by id and by range in turn, side by side). The bench
   writes the Sends and their queue records itself in the queues job's format (--fill
   direct): the job is measured by bench queues above, not here." \
    replay --messages "${BENCH_REPLAY_MESSAGES:-1000000}" $SECURITY
$T local up --replicas 2x2 --spark >/dev/null
run "bench catchup (a peer down 60 s while 1,000 msgs/s go to it, restarted under the traffic;
   target time to normal <= 15 s, held back within its bound; Spark job added)" catchup
echo
echo "== load average after: $(cut -d" " -f1-3 /proc/loadavg)"
