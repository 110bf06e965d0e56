"""The ONNX Runtime embedder (the default) against sentence-transformers on torch, the model build,
and a run time without torch."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from gaama import onnx_model
from gaama.config import load_settings
from gaama.embed import MiniLMEmbedder, build_embedder
from gaama.embed_onnx import OnnxMiniLMEmbedder
from gaama.errors import ConfigError
from services.query.main import query_embedder_settings

#: Short and long, punctuation, accents and scripts the vocabulary lacks, the empty string, and a
#: text past the 256-token limit (truncation must match too).
TEXTS = [
    "Hello world",
    "Caroline went to the LGBTQ support group on 7 May 2023.",
    "Melanie painted a sunrise over the lake last year and she loves it",
    "What did Caroline research?",
    "When did Melanie run a charity race?",
    "I'm so proud of you for adopting those kids!",
    "user prefers dark mode",
    "The meeting moved to Thursday at 3pm in room 4B.",
    "ok",
    "x",
    "My dog Max loves the beach",
    "Tax forms are due on April 15th",
    "Ünïcödé café naïve résumé 東京 🙂",
    "",
    "The quick brown fox jumps over the lazy dog. " * 40,
]
FLOOR = {"fp32": 0.99, "int8": 0.98}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both variants built from the wheel by the build step ``make install`` runs."""
    d = tmp_path_factory.mktemp("onnx")
    for v in onnx_model.VARIANTS:
        onnx_model.build(d, v)
    return d


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return MiniLMEmbedder().embed_sync(TEXTS)


@pytest.mark.parametrize("variant", onnx_model.VARIANTS)
def test_onnx_agrees_with_sentence_transformers(
    model_dir: Path, reference: np.ndarray, variant: onnx_model.Variant
):
    out = OnnxMiniLMEmbedder(model_dir=model_dir, variant=variant, batch_size=4).embed_sync(TEXTS)
    assert out.shape == (len(TEXTS), 384)
    assert out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    cosines = (out * reference).sum(axis=1)
    assert cosines.min() >= FLOOR[variant], dict(zip(TEXTS, cosines.round(4), strict=True))


def test_the_agreement_floor_catches_wrong_pooling_and_normalisation(reference: np.ndarray):
    """The checks above catch a wrong pooling or a missing normalisation on these texts: CLS
    pooling falls below the cosine floor, and mean-pooled rows without the L2 step are far from
    unit length (cosine alone would not see a scale). Mean pooling over padding as well is caught
    by ``test_batching_and_order_do_not_change_vectors``."""
    st = MiniLMEmbedder._load()
    tokens = st.encode(TEXTS, output_value="token_embeddings", convert_to_numpy=False)
    cls = np.stack([t[0].numpy() for t in tokens])
    cls /= np.linalg.norm(cls, axis=1, keepdims=True)
    assert (cls * reference).sum(axis=1).min() < FLOOR["int8"]
    mean = np.stack([t.numpy().mean(axis=0) for t in tokens])
    assert np.allclose((mean / np.linalg.norm(mean, axis=1, keepdims=True)), reference, atol=1e-4)
    assert np.abs(np.linalg.norm(mean, axis=1) - 1.0).min() > 0.05


def test_batching_and_order_do_not_change_vectors(model_dir: Path):
    e = OnnxMiniLMEmbedder(model_dir=model_dir, batch_size=3)
    together = e.embed_sync(TEXTS)
    alone = np.stack([e.embed_sync([t])[0] for t in TEXTS])
    assert np.allclose(together, alone, atol=1e-5)  # padding is masked out


def test_threads_and_spinning_are_settings_that_do_not_change_vectors(model_dir: Path):
    two = build_embedder(
        load_settings(onnx_model_dir=str(model_dir), onnx_threads=2, onnx_spin=True)
    )
    assert isinstance(two, OnnxMiniLMEmbedder) and (two.threads, two.spin) == (2, True)
    one = build_embedder(load_settings(onnx_model_dir=str(model_dir)))
    assert isinstance(one, OnnxMiniLMEmbedder) and (one.threads, one.spin) == (1, False)
    assert np.allclose(two.embed_sync(TEXTS[:4]), one.embed_sync(TEXTS[:4]), atol=1e-5)


def test_the_query_service_encodes_on_its_own_thread_count(model_dir: Path):
    """The query service's embedder takes GAAMA_QUERY_ONNX_THREADS (2 by default), the
    pipeline stages' GAAMA_ONNX_THREADS (1) stays theirs; spinning stays off."""
    settings = load_settings(onnx_model_dir=str(model_dir))
    query = build_embedder(query_embedder_settings(settings))
    stage = build_embedder(settings)
    assert isinstance(query, OnnxMiniLMEmbedder) and isinstance(stage, OnnxMiniLMEmbedder)
    assert (query.threads, query.spin, stage.threads) == (2, False, 1)
    three = load_settings(onnx_model_dir=str(model_dir), query_onnx_threads=3, onnx_threads=4)
    assert build_embedder(query_embedder_settings(three)).threads == 3  # type: ignore[attr-defined]
    assert three.onnx_threads == 4  # the stages' setting is left as it was


def test_batch_lanes_keep_every_row_in_place(model_dir: Path):
    one = OnnxMiniLMEmbedder(model_dir=model_dir, batch_size=2, lanes=1)
    five = OnnxMiniLMEmbedder(model_dir=model_dir, batch_size=2, lanes=5)
    assert np.allclose(five.embed_sync(TEXTS), one.embed_sync(TEXTS), atol=1e-5)
    # eight batches ran on several lane threads (a call of one batch runs on the caller's)
    assert sum(t.name.startswith("gaama-onnx-5-lanes") for t in threading.enumerate()) >= 2
    lanes = build_embedder(load_settings(onnx_model_dir=str(model_dir), onnx_lanes=3))
    assert isinstance(lanes, OnnxMiniLMEmbedder) and lanes.lanes == 3
    default = build_embedder(load_settings(onnx_model_dir=str(model_dir)))
    assert isinstance(default, OnnxMiniLMEmbedder) and default.lanes == 2


async def test_missing_model_is_built_on_first_use(tmp_path: Path):
    e = build_embedder(load_settings(onnx_model_dir=str(tmp_path)))
    assert isinstance(e, OnnxMiniLMEmbedder)
    (vec,) = await e.embed(["built on first use"])
    assert vec.shape == (384,)
    assert onnx_model.model_path(tmp_path, "fp32").exists()
    assert onnx_model.tokenizer_path(tmp_path).exists()


_NO_BUILD = """
import sys
sys.modules["onnx"] = None  # the build tools are not installed (as in the image)
from gaama.config import load_settings
from gaama.embed import build_embedder
from gaama.errors import ConfigError
from services.query.main import query_embedder_settings
try:
    build_embedder(load_settings()).warm_up()
except ConfigError as exc:
    print(exc)
    sys.exit(3)
"""


def test_missing_model_without_build_tools_names_the_command(tmp_path: Path):
    env = {**os.environ, "GAAMA_ONNX_MODEL_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", _NO_BUILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 3, out.stderr
    assert "python -m gaama.onnx_model" in out.stdout


_NO_TORCH = """
import sys
from gaama.config import load_settings
from gaama.embed import build_embedder
import services.query.main, services.ingest.main, services.extract.main, services.reflect.main
e = build_embedder(load_settings())
e.warm_up()
assert e.embed_sync(["no torch here"]).shape == (1, 384)
heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules)
print("loaded:", heavy)
sys.exit(1 if heavy else 0)
"""


def test_default_backend_runs_without_torch(model_dir: Path):
    env = {**os.environ, "GAAMA_ONNX_MODEL_DIR": str(model_dir)}
    env.pop("GAAMA_EMBEDDER", None)
    out = subprocess.run(
        [sys.executable, "-c", _NO_TORCH], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_unknown_embedder_is_a_config_error():
    with pytest.raises(ConfigError, match="GAAMA_EMBEDDER"):
        load_settings(embedder="bert-large")
