#!/usr/bin/env bash
# What waiting for Redis' AOF fsync before each commit (GAAMA_DURABILITY=aof) costs ingest, in
# one run on one stack: durability off, on with the default batch, on with a larger batch.
# Usage: scripts/durability-ab.sh [turns]   (prints one line per variant; JSON in /tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
turns="${1:-2000}"
dir="$(mktemp -d)"
rp=$(.venv/bin/python -c 'from gaama.devstack import free_port; print(free_port())')
kp=$(.venv/bin/python -c 'from gaama.devstack import free_port; print(free_port())')
eval "$(.venv/bin/gaama dev up --dir "$dir" --redis-port "$rp" --kafka-port "$kp")"
trap '.venv/bin/gaama dev down --dir "$dir" >/dev/null 2>&1 || true' EXIT
for variant in "none 64" "aof 64" "aof 256"; do
  set -- $variant
  out="/tmp/durability-$1-$2.json"
  GAAMA_DURABILITY=$1 GAAMA_INGEST_BATCH=$2 .venv/bin/python -m benchmarks ingest \
    --turns "$turns" --json "$out" --no-progress \
    --redis-url "$GAAMA_REDIS_URL" --kafka-bootstrap "$GAAMA_KAFKA_BOOTSTRAP" >/dev/null
  .venv/bin/python -c "import json,sys; d=json.load(open('$out')); print(f'durability=$1 batch=$2: {d[\"turns_per_s\"]} turns/s, batch p50 {d[\"batch_p50_ms\"]} ms, {d[\"mean_batch_turns\"]} turns/batch')"
done
