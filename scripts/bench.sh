#!/usr/bin/env bash
# `make bench`: every benchmark on a fresh local stack, each beside its raw baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
T=.venv/bin/tidemark
export TIDEMARK_STATE_DIR="${TIDEMARK_STATE_DIR:-$PWD/.tidemark}"
trap '$T local down >/dev/null' EXIT
$T local up --brokers 3 >/dev/null
echo "== bench produce (target ratio >= 0.8)"
$T bench produce
echo
echo "== bench ingest (target >= 100k transactions/s per node)"
$T bench ingest
echo
echo "== bench queues (target send->queue p99 < 3 s)"
$T bench queues
