"""Embedders: the OpenAI option through the real ``openai`` client, and the dimension checks."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from gaama.config import load_settings
from gaama.embed import GOMP_SPINCOUNT, MiniLMEmbedder, OpenAIEmbedder, build_embedder
from gaama.embed_onnx import OnnxMiniLMEmbedder
from gaama.errors import ConfigError
from tests.fakes.openai_server import FakeOpenAIServer


async def test_openai_embedder_batches_and_normalises():
    with FakeOpenAIServer() as srv:
        s = load_settings(
            embedder="openai",
            llm_base_url=srv.base_url,
            llm_model="fake",
            embed_dim=16,
            embed_batch=3,
        )
        emb = build_embedder(s)
        assert isinstance(emb, OpenAIEmbedder)
        out = await emb.embed([f"text {i}" for i in range(7)])
        await emb.aclose()
        batches = [r["input"] for r in srv.requests if "input" in r]
    assert out.shape == (7, 16)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert [len(b) for b in batches] == [3, 3, 1]


async def test_openai_embedder_rejects_a_wrong_dimension():
    with FakeOpenAIServer() as srv:
        s = load_settings(
            embedder="openai", llm_base_url=srv.base_url, llm_model="fake", embed_dim=32
        )
        emb = build_embedder(s)
        with pytest.raises(ConfigError, match="GAAMA_EMBED_DIM"):
            await emb.embed(["x"])
        await emb.aclose()


def test_minilm_dimension_mismatch_is_a_config_error():
    with pytest.raises(ConfigError, match="GAAMA_EMBED_DIM=128"):
        build_embedder(load_settings(embed_dim=128))
    with pytest.raises(ConfigError, match="GAAMA_EMBED_DIM=128"):
        build_embedder(load_settings(embed_dim=128, embedder="minilm-torch"))


def test_backend_is_chosen_by_the_setting():
    assert isinstance(build_embedder(load_settings()), OnnxMiniLMEmbedder)  # the default
    # "minilm" named the local model before the ONNX backend: same model, same vectors.
    assert isinstance(build_embedder(load_settings(embedder="minilm")), OnnxMiniLMEmbedder)
    assert isinstance(build_embedder(load_settings(embedder="minilm-torch")), MiniLMEmbedder)


_SPIN_PROBE = """
import os, sys
from gaama.embed import MiniLMEmbedder
assert "torch" not in sys.modules  # nothing loaded libgomp before the embedder does
MiniLMEmbedder().warm_up()
assert "torch" in sys.modules
print(os.environ["GOMP_SPINCOUNT"])
"""


@pytest.mark.parametrize(("preset", "want"), [(None, GOMP_SPINCOUNT), ("4000", "4000")])
def test_minilm_limits_openmp_spinning_before_torch_loads(preset: str | None, want: str):
    """libgomp reads GOMP_SPINCOUNT once, when torch loads it: the embedder sets its short spin
    before that import (docs/decisions/0006-openmp-spin-count.md), and an operator's value wins."""
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if preset is not None:
        env["GOMP_SPINCOUNT"] = preset
    out = subprocess.run(
        [sys.executable, "-c", _SPIN_PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == want
