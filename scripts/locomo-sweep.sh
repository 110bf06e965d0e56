#!/usr/bin/env bash
# Retrieval-parameter sweep on the LoCoMo dev split: gaama's evidence recall (overall, categories
# 1 and 2) for each variant of the subgraph bound and the read-ahead, on the same graph recipe as
# `make bench-locomo`. Prints one row per variant; docs/benchmarks.md ("Subgraph bound") quotes it.
# Usage: scripts/locomo-sweep.sh [--param NAME=VALUE ...]   (extra params apply to every variant)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
DATA=${DATA:-../shared/data/locomo/locomo_dev.json}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
variants=(
  "max_expanded=200"
  "max_expanded=300"
  "max_expanded=500"
  "max_expanded=300 expanded_read=60 expanded_candidates=60"
  "max_expanded=300 expanded_read=120 expanded_candidates=100"
)
echo "| variant | R@10 all | R@1000w all | R@10 cat 1 | R@1000w cat 1 | R@10 cat 2 | R@1000w cat 2 |"
echo "|---|---|---|---|---|---|---|"
for i in "${!variants[@]}"; do
  args=()
  for p in ${variants[$i]}; do args+=(--param "$p"); done
  echo "# variant $((i + 1))/${#variants[@]}: ${variants[$i]}" >&2
  "$BIN/python" -m benchmarks locomo --data "$DATA" --modes gaama --no-progress "${args[@]}" "$@" \
    --json "$out/$i.json" >/dev/null
  "$BIN/python" - "$out/$i.json" "${variants[$i]}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["modes"]["gaama"]
cells = [f"{m[c]['R@10']:.3f} | {m[c]['R@budget']:.3f}" for c in ("overall", "cat1", "cat2")]
print(f"| {sys.argv[2]} | " + " | ".join(cells) + " |")
PY
done
