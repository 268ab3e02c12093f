#!/usr/bin/env bash
# `make demo`: replay on restart, end to end, on a local stack.
#  1. a 3-broker KRaft cluster on 127.0.0.1 (SCRAM users per role, topic ACLs), four
#     LevelDB replica nodes (2 partitions x 2 replicas) and the Spark queues job;
#  2. `tidemark demo`: peers as separate processes. Receiver B starts; senders A and C send
#     Ticks to B and publish Notes (B subscribes); B is killed with SIGKILL while the
#     traffic goes on; B restarts, replays its queue from a replica (progress shown),
#     hands over and goes live while A and C keep sending; then a summary: sent, delivered
#     live, replayed, forwarded during handover, duplicates dropped, dead-lettered, lost,
#     the stable cut, the GC point, queue depths.
# Exits 0 only if lost = 0 (nothing applied twice, and replayed > 0). The stack starts empty
# (the state folder is reset). DEMO_KEEP=1 leaves it running afterwards (`make down`).
# DEMO_ARGS passes flags to `tidemark demo` (e.g. "--rate 300 --down 30").
set -euo pipefail
cd "$(dirname "$0")/.."
T=.venv/bin/tidemark
export TIDEMARK_STATE_DIR="${TIDEMARK_STATE_DIR:-$PWD/.tidemark}"
cleanup() { [ "${DEMO_KEEP:-0}" = 1 ] || $T local down >/dev/null; }
trap cleanup EXIT

step() { echo; echo "== $*"; }

# Each demo starts from an empty stack.
$T local down >/dev/null 2>&1 || true
rm -rf "$TIDEMARK_STATE_DIR"

step "tidemark local up --sasl --brokers 3 --replicas 2x2 --spark   (state in $TIDEMARK_STATE_DIR)"
$T local up --sasl --brokers 3 --replicas 2x2 --spark
$T local status

step "tidemark demo: A and C send to B; B is killed (SIGKILL), restarts, replays, hands over"
# shellcheck disable=SC2086 # DEMO_ARGS is a list of flags
$T demo ${DEMO_ARGS:-}
