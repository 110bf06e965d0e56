#!/usr/bin/env bash
# Where PPR runs, A/B: the 10k-node query benchmark (c=1, gaama and semantic) with every walk
# handed to a worker thread (GAAMA_RETRIEVAL__PPR_INLINE_MAX=0) and with the default (a walk of
# the default bound runs in the request's thread), in the
# order A B B A so drift of a shared machine falls on both alike. Prints one row per run;
# docs/benchmarks.md ("Where PPR runs") quotes it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
default=$("$BIN/python" -c 'from gaama.config import RetrievalSettings as R; print(R().ppr_inline_max)')
echo "| PPR runs in | gaama p50 ms | semantic p50 ms | ratio | gaama ppr stage p50 ms | gaama expand stage p50 ms |"
echo "|---|---|---|---|---|---|"
for i in 1 2 3 4; do
  if [ "$i" = 1 ] || [ "$i" = 4 ]; then limit=0; where="a worker thread"; else limit=$default; where="the request's thread"; fi
  echo "# run $i/4: GAAMA_RETRIEVAL__PPR_INLINE_MAX=$limit" >&2
  GAAMA_RETRIEVAL__PPR_INLINE_MAX=$limit "$BIN/python" -m benchmarks query --sizes 10000 \
    --concurrency 1 --modes gaama,semantic --requests 400 --no-progress --json "$out/$i.json" \
    >/dev/null 2>&1
  "$BIN/python" - "$out/$i.json" "$where" <<'PY'
import json, sys
runs = {r["mode"]: r for r in json.load(open(sys.argv[1]))["runs"]}
g, s = runs["gaama"], runs["semantic"]
print(f"| {sys.argv[2]} | {g['p50_ms']:.1f} | {s['p50_ms']:.1f} | {g['p50_ms'] / s['p50_ms']:.2f}× "
      f"| {g['stage_p50_ms']['ppr']:.2f} | {g['stage_p50_ms']['expand']:.2f} |")
PY
done
