#!/usr/bin/env bash
# `make demo`: the main job on the local stack. Starts a 3-broker KRaft cluster on loopback,
# writes traffic with `tidemark load`, and shows what landed. Set DEMO_KEEP=1 to leave the
# stack running afterwards (stop it with `make down`).
set -euo pipefail
cd "$(dirname "$0")/.."
T=.venv/bin/tidemark
export TIDEMARK_STATE_DIR="${TIDEMARK_STATE_DIR:-$PWD/.tidemark}"
cleanup() { [ "${DEMO_KEEP:-0}" = 1 ] || $T local down >/dev/null; }
trap cleanup EXIT

echo "== tidemark local up (3 KRaft brokers on 127.0.0.1, state in $TIDEMARK_STATE_DIR)"
$T local up --brokers 3
$T local status
echo
echo "== topics (replication factor 3, min.insync.replicas=2)"
$T topics describe
echo
echo "== tidemark load --peers 100 --messages 100000 --ack-ratio 0.5"
$T load --peers 100 --messages 100000 --ack-ratio 0.5 --seed 7
echo
echo "== what landed (read back with a plain consumer)"
.venv/bin/python -m log.inspect
