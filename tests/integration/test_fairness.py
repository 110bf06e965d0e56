"""Per-tenant admission and the request-body limit on the query service (ASGI transport, real
Redis): one tenant's burst is refused with 429 at once and never turns another tenant's requests
into errors; a body over GAAMA_HTTP_MAX_BODY_BYTES is refused before it is parsed."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest

from gaama.config import Settings
from gaama.embed import MiniLMEmbedder
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from tests.integration.test_query_api import A, B, make_app, with_keys
from tests.integration.test_search import build_memory

pytestmark = pytest.mark.requires_stack


@pytest.fixture
async def memory(graph: GraphStore, embedder: MiniLMEmbedder) -> None:
    await build_memory(graph, embedder, "tenant-a")
    await build_memory(graph, embedder, "tenant-b")


async def test_a_burst_gets_429_and_the_other_tenant_no_errors(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    memory: None,
) -> None:
    client, _ = make_app(with_keys(settings), graph, index, embedder)
    burst: Counter[int] = Counter()
    retry_after: set[str] = set()
    other: list[int] = []
    done = asyncio.Event()

    async def hammer() -> None:
        while not done.is_set():
            r = await client.post("/v1/search", headers=A, json={"query": "pottery class"})
            burst[r.status_code] += 1
            if r.status_code == 429:
                retry_after.add(r.headers.get("Retry-After", ""))
                assert "tenant over its" in r.json()["error"]
                await asyncio.sleep(0.01)

    async def polite() -> None:
        await asyncio.sleep(0.2)  # the burst is under way
        for _ in range(20):
            r = await client.post("/v1/search", headers=B, json={"query": "pottery class"})
            other.append(r.status_code)
        done.set()

    async with client:
        await asyncio.wait_for(asyncio.gather(polite(), *(hammer() for _ in range(150))), 120)
        metrics = (await client.get("/metrics")).text
    assert other == [200] * 20
    assert burst[429] > 0 and burst[200] > 0
    assert set(burst) <= {200, 429}, burst
    assert retry_after and all(v.isdigit() and int(v) >= 1 for v in retry_after)
    assert 'outcome="concurrency"' in metrics and "tenant-a" not in metrics
    assert "tenant-b" not in metrics


async def test_rate_quota_answers_429_with_retry_after(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    s = with_keys(settings, tenant_rate=0.5, tenant_burst=2)
    client, _ = make_app(s, graph, index, embedder)
    async with client:
        codes = [(await client.get("/v1/nodes/fa_x", headers=A)).status_code for _ in range(2)]
        assert codes == [404, 404]
        r = await client.get("/v1/nodes/fa_x", headers=A)
        assert r.status_code == 429 and r.headers["Retry-After"] == "2"
        assert "GAAMA_TENANT_RATE" in r.json()["error"]
        assert (await client.get("/v1/nodes/fa_x", headers=B)).status_code == 404


@pytest.fixture
async def small_body_api(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> AsyncIterator[httpx.AsyncClient]:
    client, _ = make_app(with_keys(settings, http_max_body_bytes=4096), graph, index, embedder)
    async with client:
        yield client


async def test_body_over_the_limit_is_413_before_parsing(
    small_body_api: httpx.AsyncClient,
) -> None:
    c = small_body_api
    r = await c.post("/v1/search", headers=A, json={"query": "x" * 5000})
    assert r.status_code == 413
    assert "4096 bytes (GAAMA_HTTP_MAX_BODY_BYTES)" in r.json()["error"]
    # Not even valid JSON: refused on its declared length, never parsed.
    r = await c.post("/v1/search", headers=A, content=b"[" * 5000)
    assert r.status_code == 413

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it streams
        for _ in range(10):
            yield b" " * 1000

    r = await c.post("/v1/search", headers=A, content=chunks())
    assert r.status_code == 413
    r = await c.post("/v1/search", headers=A, json={"query": "x" * 2001})
    assert r.status_code == 422 and "at most 2000 allowed (GAAMA_QUERY_MAX_CHARS)" in r.text
