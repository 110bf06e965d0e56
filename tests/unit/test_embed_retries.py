"""The OpenAI embedder is the one retry layer for its requests: the SDK does not retry, ours are
bounded by GAAMA_LLM_MAX_RETRIES, and a permanent refusal is not repeated."""

from __future__ import annotations

import httpx
import pytest

from gaama.config import load_settings
from gaama.embed import OpenAIEmbedder
from gaama.errors import LLMTransientError


def _embedder(statuses: list[int], calls: list[int], retries: int = 2) -> OpenAIEmbedder:
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        status = statuses[len(calls) - 1] if len(calls) <= len(statuses) else 200
        if status != 200:
            return httpx.Response(status, json={"error": {"message": f"fake {status}"}})
        data = [{"object": "embedding", "index": 0, "embedding": [1.0, 0.0, 0.0, 0.0]}]
        return httpx.Response(200, json={"object": "list", "data": data, "model": "m"})

    settings = load_settings(
        embedder="openai",
        llm_base_url="http://fake/v1",
        llm_model="fake",
        embed_dim=8,
        llm_max_retries=retries,
        retry_backoff_s=0,
    )
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    emb = OpenAIEmbedder(settings, http_client=client)
    emb.dim = 4
    return emb


async def test_transient_failures_are_retried_up_to_the_bound() -> None:
    calls: list[int] = []
    emb = _embedder([503, 429], calls)
    assert (await emb.embed(["x"])).shape == (1, 4)
    assert len(calls) == 3
    calls.clear()
    emb = _embedder([503, 503, 503, 503], calls)
    with pytest.raises(LLMTransientError):
        await emb.embed(["x"])
    assert len(calls) == 3  # one attempt and two retries, none by the SDK


async def test_a_refusal_is_not_retried() -> None:
    calls: list[int] = []
    emb = _embedder([400], calls)
    with pytest.raises(LLMTransientError):
        await emb.embed(["x"])
    assert len(calls) == 1
