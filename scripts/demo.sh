#!/usr/bin/env bash
# `make demo`: the main job on the local stack.
#  1. a 3-broker KRaft cluster on 127.0.0.1, four LevelDB replica nodes (2 partitions x 2
#     replicas) and the Spark queues job;
#  2. 100k sends (half acked) through `tidemark load`;
#  3. the universal stable cut reaches the txlog end offsets, the queues hold sent - acked;
#  4. kill -9 replica p0r1, write more: the cut for p0's partitions is held back by p0r1;
#  5. restart it: it catches up and the cut reaches the new ends.
# The stack starts empty (the state folder is reset). Set DEMO_KEEP=1 to leave the stack running afterwards (stop it with `make down`).
set -euo pipefail
cd "$(dirname "$0")/.."
T=.venv/bin/tidemark
PY=.venv/bin/python
export TIDEMARK_STATE_DIR="${TIDEMARK_STATE_DIR:-$PWD/.tidemark}"
cleanup() { [ "${DEMO_KEEP:-0}" = 1 ] || $T local down >/dev/null; }
trap cleanup EXIT

step() { echo; echo "== $*"; }
summary() { $T replica status | grep -v '^      '; }   # leave out the per-partition maps

# Each demo starts from an empty stack.
$T local down >/dev/null 2>&1 || true
rm -rf "$TIDEMARK_STATE_DIR"

step "tidemark local up --replicas 2x2 --spark   (state in $TIDEMARK_STATE_DIR)"
$T local up --brokers 3 --replicas 2x2 --spark
$T local status

step "topics"
$T topics describe

step "tidemark load --peers 100 --messages 100000 --ack-ratio 0.5"
$T load --peers 100 --messages 100000 --ack-ratio 0.5 --seed 7 | tee "$TIDEMARK_STATE_DIR/load1.txt"
$PY -m log.inspect

step "waiting for the stable cut to reach the txlog end offsets"
$PY scripts/wait_cut.py --timeout 180
$T replica status

step "queues materialized by Spark (waiting for progress to cover txlog)"
$T queues depth --wait 300 | tail -n 3

step "kill -9 replica p0r1, then write 20000 more sends"
$T local kill p0r1
$T load --peers 100 --messages 20000 --ack-ratio 0.5 --seed 8
$PY scripts/wait_cut.py --held-by p0r1 --timeout 60
summary

step "tidemark local up: restarts only p0r1, which catches up"
$T local up >/dev/null
$PY scripts/wait_cut.py --timeout 180
summary
$T queues depth --wait 300 | tail -n 3
