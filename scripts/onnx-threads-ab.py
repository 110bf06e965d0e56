"""Threads and spinning of the ONNX embedder against torch, in one process: batch encode rate
(episode texts as the ingest service embeds them, batches of 64) and single-query p50.

    PYTHONPATH=shared:. python scripts/onnx-threads-ab.py [rounds]

Prints one line per round; run it on a quiet and on a busy machine to see the spinning trade-off
(docs/benchmarks.md, "Reading the embedding figures"). Needs the torch extra.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

import numpy as np
import torch

from benchmarks.ingest import Conv, _turns
from benchmarks.synthetic import query_texts
from gaama.embed import MiniLMEmbedder
from gaama.embed_onnx import OnnxMiniLMEmbedder

CONVS = [Conv(f"t{t}", f"c{c}", t * 5 + c) for t in range(4) for c in range(5)]
EPISODES = [
    t.episode_text() for t in _turns(CONVS, 1024, datetime(2024, 3, 1, tzinfo=UTC).timestamp())
]
QUERIES = query_texts(200)


def measure(e: MiniLMEmbedder | OnnxMiniLMEmbedder) -> str:
    e.embed_sync(EPISODES[:64])
    t0 = time.perf_counter()
    for i in range(0, len(EPISODES), 64):
        e.embed_sync(EPISODES[i : i + 64])
    rate = len(EPISODES) / (time.perf_counter() - t0)
    lat = []
    for q in QUERIES:
        t0 = time.perf_counter()
        e.embed_sync([q])
        lat.append((time.perf_counter() - t0) * 1000)
    return f"{rate:4.0f} texts/s {np.percentile(lat, 50):4.1f} ms"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    m = MiniLMEmbedder()
    m.warm_up()
    for r in range(rounds):
        out = []
        for n in (1, 2):
            torch.set_num_threads(n)
            out.append(f"torch {n}t: {measure(m)}")
        out.append(f"onnx 1t: {measure(OnnxMiniLMEmbedder(threads=1))}")
        out.append(f"onnx 2t spin: {measure(OnnxMiniLMEmbedder(threads=2, spin=True))}")
        out.append(f"onnx 2t no spin: {measure(OnnxMiniLMEmbedder(threads=2, spin=False))}")
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        print(f"round {r + 1} (load {load}): " + " | ".join(out))


if __name__ == "__main__":
    main()
