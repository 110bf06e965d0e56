#!/usr/bin/env bash
# A/B of ingest throughput between two checkouts, in the order A B B A on one machine:
#   scripts/ingest-ab.sh <checkout A> <checkout B> [turns] [rounds of A B B A]
# Each run is `python -m benchmarks ingest --backends onnx --rounds 1` with PYTHONPATH on that
# checkout (the service process inherits it); prints each run's turns/s and ingest ÷ embed-only
# where the checkout's benchmark reports it.
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); TURNS=${3:-2000}; ROUNDS=${4:-1}
PY=${PYTHON:-/work/main/.venv/bin/python}
OUT=$(mktemp -d)
run() {
  local tree=$1 tag=$2 n=$3
  (cd "$tree" && PYTHONPATH="$tree/shared:$tree" "$PY" -m benchmarks ingest --turns "$TURNS" \
    --backends onnx --rounds 1 --no-progress --json "$OUT/$tag-$n.json" >/dev/null)
  "$PY" - "$OUT/$tag-$n.json" "$tag" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}: {d['turns_per_s']:.1f} turns/s, batch p50 {d['batch_p50_ms']:.0f} ms, "
      f"ingest/embed-only {d.get('share_of_embed_only', float('nan'))}, {d['date']}")
PY
}
for r in $(seq "$ROUNDS"); do
  run "$A" A "$r.1"; run "$B" B "$r.1"; run "$B" B "$r.2"; run "$A" A "$r.2"
done
