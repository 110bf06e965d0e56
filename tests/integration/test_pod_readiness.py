"""Readiness is the pod's alone: with Redis held (every command paused) the query service stays
ready, its health page says ``degraded`` naming Redis, and a request that needs Redis gets the
service's own 503 with ``Retry-After``; no probe of any service creates the vector index (a fresh
key prefix and index name, probed, then ``FT._LIST``); the MCP gateway stays ready with the
query service gone."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from gaama.config import ApiKey, Settings, hash_api_key
from gaama.devstack import free_port
from gaama.embed import MiniLMEmbedder
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from services.ingest.app import create_http_app
from services.ingest.handlers import IngestDeps
from services.runtime.http import ops_app
from services.runtime.producer import EventProducer
from services.runtime.readiness import IndexKeeper, redis_state
from tests.integration.test_query_api import make_app
from tests.integration.test_store_outage import redis_paused
from tests.support.services import ServiceProcess, wait_for

pytestmark = pytest.mark.requires_stack

KEY = "key-readiness"
H = {"Authorization": f"Bearer {KEY}"}


def _keyed(settings: Settings, **update: object) -> Settings:
    keys = [ApiKey(key_sha256=hash_api_key(KEY), tenant="acme")]
    return settings.model_copy(update={"api_keys": keys, **update})


async def _indexes(redis: aioredis.Redis) -> set[str]:
    names = await redis.execute_command("FT._LIST")  # type: ignore[no-untyped-call]
    return {n.decode() if isinstance(n, bytes) else str(n) for n in names}


@pytest.mark.slow
async def test_redis_held_query_stays_ready_answers_503_and_shows_degraded(
    settings: Settings, index: VectorIndex, tmp_path: Path
) -> None:
    if settings.redis_cluster:
        pytest.skip("one Redis is enough to show it")
    s = _keyed(settings)
    query = ServiceProcess("query", s, tmp_path).start()
    try:
        async with httpx.AsyncClient(base_url=query.url, timeout=15) as http:
            health = (await http.get("/healthz")).json()
            assert health == {"status": "ok", "dependencies": {"redis": "ok"}}
            async with redis_paused(s.redis_url, 20_000):
                t0 = time.monotonic()
                ready = await http.get("/readyz")
                assert ready.status_code == 200 and ready.json() == {"status": "ready"}
                assert time.monotonic() - t0 < 1.0, "readiness waited on Redis"
                t0 = time.monotonic()
                health_r = await http.get("/healthz")
                assert time.monotonic() - t0 < 3.0, "the liveness probe outlasts its timeout"
                r = await http.post("/v1/search", headers=H, json={"query": "pottery"})
            assert health_r.status_code == 200, health_r.text
            assert health_r.json()["status"] == "degraded"
            assert "redis unreachable" in health_r.json()["dependencies"]["redis"]
            assert r.status_code == 503, r.text
            assert r.headers["Retry-After"] == str(s.http_retry_after_s)
            assert "Redis unavailable" in r.json()["error"]

            async def recovered() -> bool:
                return (await http.get("/healthz")).json()["status"] == "ok"

            await wait_for(recovered, timeout=30, interval=0.5)
            r = await http.post("/v1/search", headers=H, json={"query": "pottery"})
            assert r.status_code == 200, r.text
    finally:
        query.stop()


async def test_no_probe_creates_the_index(
    settings: Settings, redis_client: aioredis.Redis, embedder: MiniLMEmbedder
) -> None:
    """Query, ingest and a consumer stage's ops pages, each on a fresh prefix and index name:
    probed again and again, the index is reported missing and never created; the keeper then
    creates it."""
    if settings.redis_cluster:
        pytest.skip("FT._LIST answers for one node")
    fresh = f"probe-{uuid.uuid4().hex[:8]}"
    s = _keyed(settings, key_prefix=fresh, index_name=f"{fresh}-idx")
    keys = Keys(s.key_prefix)
    index = VectorIndex(redis_client, s.index_name, embedder.dim, keys)
    graph = GraphStore(redis_client, keys)
    before = await _indexes(redis_client)
    assert s.index_name not in before

    query, _ = make_app(s, graph, index, embedder)
    producer = EventProducer(s.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{free_port()}"}))
    ingest = create_http_app(
        IngestDeps(settings=s, graph=graph, embedder=embedder),
        CollectorRegistry(),
        lambda: redis_state(redis_client, index),
        producer,
    )
    stage = ops_app(
        "extract",
        CollectorRegistry(),
        s,
        dependencies={"redis": lambda: redis_state(redis_client, index)},
    )
    try:
        for app in (query._transport.app, ingest, stage):  # type: ignore[attr-defined]
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://svc") as c:
                for _ in range(3):
                    assert (await c.get("/readyz")).status_code == 200
                    health = await c.get("/healthz")
                    assert health.status_code == 200 and health.json()["status"] == "degraded"
                    assert "missing" in health.json()["dependencies"]["redis"], health.json()
        assert await _indexes(redis_client) == before, "a probe created an index"
        assert await IndexKeeper(index).tick()
        assert s.index_name in await _indexes(redis_client)
    finally:
        await producer.aclose()
        if await index.ready():
            await index.drop()


async def test_the_mcp_gateway_is_ready_without_query_and_ingest(
    settings: Settings, tmp_path: Path
) -> None:
    """Nothing listens at the query and ingest URLs: the gateway is ready, and its health page
    names both."""
    s = _keyed(settings)
    urls = {
        "GAAMA_QUERY_URL": f"http://127.0.0.1:{free_port()}",
        "GAAMA_INGEST_URL": f"http://127.0.0.1:{free_port()}",
    }
    mcp = ServiceProcess("mcp", s, tmp_path, **urls).start()
    try:
        ready = httpx.get(f"{mcp.url}/readyz", timeout=5)
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        health = httpx.get(f"{mcp.url}/healthz", timeout=5)
        assert health.status_code == 200 and health.json()["status"] == "degraded"
        deps = health.json()["dependencies"]
        assert "query service unreachable" in deps["query"], deps
        assert "ingest service unreachable" in deps["ingest"], deps
    finally:
        mcp.stop()
