#!/usr/bin/env bash
# OpenMP spinning A/B: the 10k-node query benchmark (c=1, gaama and semantic) with libgomp's own
# spin (GOMP_SPINCOUNT=300000) and with the embedder's default (gaama.embed.GOMP_SPINCOUNT), in
# the order A B B A so drift of a shared machine falls on both alike. Also measures, outside any
# service, the CPU that torch's idle workers burn in the 5 ms after one query is encoded.
# Prints one row per run; docs/benchmarks.md ("OpenMP spinning") quotes it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| spin | gaama p50 ms | semantic p50 ms | ratio | embed p50 (gaama / semantic) | knn p50 (gaama / semantic) | idle-worker CPU after one encode |"
echo "|---|---|---|---|---|---|---|"
for i in 1 2 3 4; do
  if [ "$i" = 1 ] || [ "$i" = 4 ]; then spin=300000; else spin=$("$BIN/python" -c 'from gaama.embed import GOMP_SPINCOUNT; print(GOMP_SPINCOUNT)'); fi
  echo "# run $i/4: GOMP_SPINCOUNT=$spin" >&2
  GOMP_SPINCOUNT=$spin "$BIN/python" -m benchmarks query --sizes 10000 --concurrency 1 \
    --modes gaama,semantic --no-progress --json "$out/$i.json" >/dev/null 2>&1
  idle=$(GOMP_SPINCOUNT=$spin "$BIN/python" - <<'PY'
import os, time
from gaama.embed import MiniLMEmbedder

def cpu_ns() -> int:  # every thread of this process, from the scheduler's own accounting
    total = 0
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total

e = MiniLMEmbedder()
e.warm_up()
burnt = []
for _ in range(40):
    e.embed_sync(["what did Melanie paint last summer?"])
    before = cpu_ns()
    time.sleep(0.005)  # the main thread sleeps: what runs now is torch's idle workers
    burnt.append((cpu_ns() - before) / 1e6)
burnt.sort()
print(f"{burnt[len(burnt) // 2]:.2f} ms")
PY
)
  "$BIN/python" - "$out/$i.json" "$spin" "$idle" <<'PY'
import json, sys
runs = {r["mode"]: r for r in json.load(open(sys.argv[1]))["runs"]}
g, s = runs["gaama"], runs["semantic"]
stage = lambda name: f"{g['stage_p50_ms'][name]:.2f} / {s['stage_p50_ms'][name]:.2f}"
print(f"| {sys.argv[2]} | {g['p50_ms']:.1f} | {s['p50_ms']:.1f} | {g['p50_ms'] / s['p50_ms']:.2f}× "
      f"| {stage('embed')} | {stage('knn')} | {sys.argv[3]} |")
PY
done
