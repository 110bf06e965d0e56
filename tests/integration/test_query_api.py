"""The query service over HTTP (ASGI transport) against the real Redis: auth, validation,
tenant isolation, node lookup, ops endpoints, answering; and the Python clients."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from gaama.client import AsyncGaamaClient, GaamaAPIError
from gaama.config import ApiKey, RequestLimits, Settings, hash_api_key
from gaama.embed import MiniLMEmbedder
from gaama.metrics import query_metrics
from gaama.retrieval.search import Retriever
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from services.query.app import create_app
from services.query.handlers import QueryDeps
from services.query.main import answerer_factory
from services.runtime.readiness import IndexKeeper
from tests.fakes.openai_server import FakeOpenAIServer, good
from tests.integration.test_search import Built, build_memory
from tests.support.services import wait_for

pytestmark = pytest.mark.requires_stack

KEY_A, KEY_B, KEY_OFF = "key-tenant-a", "key-tenant-b", "key-disabled"
A = {"Authorization": f"Bearer {KEY_A}"}
B = {"X-API-Key": KEY_B}


class FakeAnswerer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def answer(self, question: str, memory_text: str) -> str:
        self.calls.append((question, memory_text))
        return "A blue bowl."


def with_keys(settings: Settings, **update: object) -> Settings:
    keys = [
        ApiKey(key_sha256=hash_api_key(KEY_A), tenant="tenant-a"),
        ApiKey(key_sha256=hash_api_key(KEY_B), tenant="tenant-b"),
        ApiKey(key_sha256=hash_api_key(KEY_OFF), tenant="tenant-a", disabled=True),
    ]
    # These tests read long rankings; the default limit on k is the default k (20).
    update.setdefault("limits", RequestLimits(k=200))
    return settings.model_copy(update={"api_keys": keys, **update})


def make_app(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    answerer: FakeAnswerer | None = None,
) -> tuple[httpx.AsyncClient, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = query_metrics(registry)
    deps = QueryDeps(
        settings=settings,
        graph=graph,
        index=index,
        retriever=Retriever(graph, index, embedder, settings, metrics=metrics),
        metrics=metrics,
        answerer_factory=(lambda: answerer) if answerer else None,
    )
    app = create_app(deps, registry)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://query"
    ), registry


@pytest.fixture
async def api(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> AsyncIterator[tuple[httpx.AsyncClient, CollectorRegistry]]:
    client, registry = make_app(with_keys(settings), graph, index, embedder)
    async with client:
        yield client, registry


@pytest.fixture
async def two_tenants(graph: GraphStore, embedder: MiniLMEmbedder) -> tuple[Built, Built]:
    return (
        await build_memory(graph, embedder, "tenant-a"),
        await build_memory(graph, embedder, "tenant-b"),
    )


async def test_auth(api: tuple[httpx.AsyncClient, CollectorRegistry]) -> None:
    c, _ = api
    body = {"query": "pottery"}
    r = await c.post("/v1/search", json=body)
    assert r.status_code == 401 and "API key" in r.json()["error"]
    assert r.headers["www-authenticate"] == "Bearer"
    r = await c.post("/v1/search", json=body, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"] == "unknown API key"
    r = await c.post("/v1/search", json=body, headers={"X-API-Key": KEY_OFF})
    assert r.status_code == 403 and "disabled" in r.json()["error"]
    assert (await c.get("/v1/nodes/ep_x")).status_code == 401
    assert (await c.post("/v1/answer", json={"question": "q"})).status_code == 401
    for headers in (A, B):
        assert (await c.post("/v1/search", json=body, headers=headers)).status_code == 200


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"query": ""}, "query"),
        ({"query": "x" * 2001}, "at most 2000"),
        ({"query": "q", "k": 0}, "k"),
        ({"query": "q", "k": 201}, "k"),
        ({"query": "q", "budget": 5}, "budget"),
        ({"query": "q", "budget": 20001}, "budget"),
        ({"query": "q", "mode": "flat"}, "mode"),
        ({"query": "q", "params": {"alpha": 1.5}}, "params.alpha"),
        ({"query": "q", "params": {"w_ppr": -1}}, "params.w_ppr"),
        ({"query": "q", "params": {"nope": 1}}, "unknown retrieval parameter"),
        ({"query": "q", "tenant": "tenant-b"}, "tenant"),
        ({"query": "q", "scope": {"conversation": ""}}, "scope.conversation"),
        ({"k": 3}, "query"),
    ],
)
async def test_validation_422(
    api: tuple[httpx.AsyncClient, CollectorRegistry], body: dict[str, object], needle: str
) -> None:
    c, _ = api
    r = await c.post("/v1/search", json=body, headers=A)
    assert r.status_code == 422, r.text
    assert needle in r.json()["error"]


async def test_malformed_json_is_422(api: tuple[httpx.AsyncClient, CollectorRegistry]) -> None:
    c, _ = api
    r = await c.post(
        "/v1/search", content=b"{not json", headers={**A, "content-type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["error"]


async def test_search_response(
    api: tuple[httpx.AsyncClient, CollectorRegistry], two_tenants: tuple[Built, Built]
) -> None:
    c, _ = api
    a, _b = two_tenants
    r = await c.post(
        "/v1/search",
        headers=A,
        json={"query": "What did Caroline make in her pottery class?", "k": 5},
    )
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["mode"] == "gaama" and len(data["ranked"]) == 5
    # The answer ranks in the top two (test_search: a fact holding the same words in fewer
    # ties with it through the lexical channel), with its provenance.
    top = {i["id"]: i for i in data["ranked"][:2]}
    assert top[a.facts[1]]["provenance"][0]["turn_id"] == "D1:2"
    assert 0 < data["words"] <= 1000 and data["memory"]
    stats = data["stats"]
    assert set(stats["timings_ms"]) == {"embed", "knn", "expand", "ppr", "pack"}
    assert stats["subgraph_nodes"] > 0 and stats["ppr_iterations"] > 0
    r = await c.post(
        "/v1/search",
        headers=A,
        json={
            "query": "pottery",
            "mode": "semantic",
            "budget": 30,
            "scope": {"conversation": "conv2"},
            "params": {"seeds": 10},
        },
    )
    data = r.json()
    assert r.status_code == 200 and data["stats"]["subgraph_nodes"] == 0
    assert data["words"] <= 30
    assert all(i["conversation"] == "conv2" for i in data["ranked"])


async def test_tenants_are_isolated(
    api: tuple[httpx.AsyncClient, CollectorRegistry], two_tenants: tuple[Built, Built]
) -> None:
    c, _ = api
    a, b = two_tenants
    ids = {
        "a": {*a.episodes.values(), *a.facts, a.reflection, *a.concepts.values()},
        "b": {*b.episodes.values(), *b.facts, b.reflection, *b.concepts.values()},
    }
    for headers, mine in ((A, "a"), (B, "b")):
        for mode in ("gaama", "semantic", "ppr"):
            r = await c.post(
                "/v1/search",
                headers=headers,
                json={
                    "query": "pottery bowl",
                    "mode": mode,
                    "k": 200,
                    "scope": {"conversation": "conv1"},
                },
            )
            data = r.json()
            seen = {i["id"] for i in data["ranked"] + data["memory"]}
            seen |= {p["episode_id"] for i in data["ranked"] for p in i["provenance"]}
            assert seen and seen <= ids[mine], (mine, mode)
    # Node ids of the other tenant answer exactly like ids that do not exist.
    own = await c.get(f"/v1/nodes/{a.facts[1]}", headers=A)
    assert own.status_code == 200
    other = await c.get(f"/v1/nodes/{b.facts[1]}", headers=A)
    missing = await c.get("/v1/nodes/fa_000000000000000000000000", headers=A)
    assert other.status_code == missing.status_code == 404
    assert other.json() == {"error": f"node {b.facts[1]!r} not found"}
    assert missing.json() == {"error": "node 'fa_000000000000000000000000' not found"}
    assert (await c.get(f"/v1/nodes/{b.facts[1]}", headers=B)).status_code == 200


async def test_node_with_neighbours(
    api: tuple[httpx.AsyncClient, CollectorRegistry], two_tenants: tuple[Built, Built]
) -> None:
    c, _ = api
    a, _b = two_tenants
    r = await c.get(f"/v1/nodes/{a.facts[1]}", headers=A)
    node = r.json()
    assert node["kind"] == "fact" and node["conversation"] == "conv1"
    assert node["sources"] == [a.episodes[("conv1", "D1:2")], a.episodes[("conv1", "D1:3")]]
    nbs = {(n["id"], n["edge"], n["direction"], n["kind"]) for n in node["neighbours"]}
    assert (a.episodes[("conv1", "D1:3")], "DERIVED_FROM", "out", "episode") in nbs
    assert (a.concepts["pottery_hobby"], "ABOUT_CONCEPT", "out", "concept") in nbs
    assert (a.reflection, "DERIVED_FROM_FACT", "in", "reflection") in nbs
    assert node["neighbours_total"] == len(node["neighbours"]) == 4
    ep = (await c.get(f"/v1/nodes/{a.episodes[('conv1', 'D1:2')]}", headers=A)).json()
    assert ep["turn_id"] == "D1:2" and ep["speaker"] == "Melanie"
    next_edges = [n for n in ep["neighbours"] if n["edge"] == "NEXT"]
    assert {n["direction"] for n in next_edges} == {"in", "out"}
    assert all(n["weight"] == 1.0 for n in next_edges)


async def test_ops_endpoints(
    api: tuple[httpx.AsyncClient, CollectorRegistry], two_tenants: tuple[Built, Built]
) -> None:
    c, _ = api
    assert (await c.get("/healthz")).json() == {"status": "ok", "dependencies": {"redis": "ok"}}
    r = await c.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    await c.post("/v1/search", headers=A, json={"query": "pottery"})
    await c.post("/v1/search", headers=A, json={"query": "pottery", "mode": "semantic"})
    await c.post("/v1/search", headers=A, json={"query": ""})
    text = (await c.get("/metrics")).text
    assert 'gaama_query_requests_total{endpoint="/v1/search",status="200"} 2.0' in text
    assert 'gaama_query_requests_total{endpoint="/v1/search",status="422"} 1.0' in text
    assert 'gaama_query_seconds_count{mode="gaama"} 1.0' in text
    assert 'gaama_query_seconds_count{mode="semantic"} 1.0' in text
    assert 'gaama_query_stage_seconds_count{stage="ppr"} 1.0' in text
    assert 'gaama_query_stage_seconds_count{stage="embed"} 2.0' in text
    assert "gaama_query_subgraph_nodes_count 1.0" in text
    assert "gaama_query_ppr_iterations_count 1.0" in text
    assert 'gaama_query_errors_total{reason="invalid"} 1.0' in text
    assert 'gaama_query_graph_nodes{kind="fact"} 10.0' in text  # 5 facts × 2 tenants
    spec = (await c.get("/openapi.json")).json()
    assert {"/v1/search", "/v1/answer", "/v1/nodes/{node_id}"} <= set(spec["paths"])


async def test_redis_down_is_the_services_own_503_while_it_stays_ready(
    settings: Settings, graph: GraphStore, embedder: MiniLMEmbedder, redis_client: aioredis.Redis
) -> None:
    s = with_keys(settings)
    dead = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    dead_graph = GraphStore(dead, Keys(settings.key_prefix))
    client, _ = make_app(s, dead_graph, VectorIndex(dead, "x", 384), embedder)
    async with client:
        r = await client.get("/readyz")
        assert r.status_code == 200 and r.json() == {"status": "ready"}
        r = await client.get("/healthz")
        assert r.status_code == 200 and r.json()["status"] == "degraded"
        assert "redis unreachable" in r.json()["dependencies"]["redis"]
        r = await client.get("/v1/nodes/fa_x", headers=A)
        assert r.status_code == 503 and "Redis unavailable" in r.json()["error"]
        assert r.headers["Retry-After"] == str(s.http_retry_after_s)
        r = await client.post("/v1/search", headers=A, json={"query": "pottery"})
        assert r.status_code == 503 and "Redis unavailable" in r.json()["error"]
        assert r.headers["Retry-After"] == str(s.http_retry_after_s)
    await dead.aclose()


async def test_probes_never_create_the_index_the_keeper_does(
    api: tuple[httpx.AsyncClient, CollectorRegistry],
    two_tenants: tuple[Built, Built],
    index: VectorIndex,
    redis_client: aioredis.Redis,
) -> None:
    """A Redis restart without persistence loses the index: the probes only report it (they
    write nothing), the index keeper recreates it, and the Query Engine indexes the node hashes
    again, with no restart of the service."""
    c, _ = api
    r = await c.post("/v1/search", headers=A, json={"query": "pottery"})
    before = {i["id"] for i in r.json()["ranked"]}
    await index.drop()  # FT.DROPINDEX (on every primary of a cluster): keeps the documents
    assert not await index.ready()
    for _ in range(3):
        assert (await c.get("/readyz")).status_code == 200
        health = await c.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "degraded"
        assert "missing" in health.json()["dependencies"]["redis"]
    assert not await index.ready(), "a probe created the index"
    assert await IndexKeeper(index).tick()
    assert await index.ready()

    async def reindexed() -> bool:
        r = await c.post("/v1/search", headers=A, json={"query": "pottery"})
        return r.status_code == 200 and {i["id"] for i in r.json()["ranked"]} == before

    assert await wait_for(reindexed, timeout=30)
    assert (await c.get("/healthz")).json()["status"] == "ok"


async def test_answer_needs_an_llm(api: tuple[httpx.AsyncClient, CollectorRegistry]) -> None:
    c, _ = api
    r = await c.post("/v1/answer", headers=A, json={"question": "What did Caroline make?"})
    assert r.status_code == 503
    assert "GAAMA_LLM_BASE_URL" in r.json()["error"]


async def test_answer_with_an_llm(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    two_tenants: tuple[Built, Built],
) -> None:
    fake = FakeAnswerer()
    s = with_keys(settings, llm_base_url="http://127.0.0.1:1/v1", llm_model="fake")
    client, _ = make_app(s, graph, index, embedder, fake)
    async with client:
        r = await client.post(
            "/v1/answer", headers=A, json={"question": "What did Caroline make in pottery class?"}
        )
    assert r.status_code == 200, r.text
    assert r.json()["answer"] == "A blue bowl." and r.json()["memory"]
    question, memory = fake.calls[0]
    assert question.startswith("What did Caroline") and "blue bowl" in memory


async def test_answer_through_the_real_llm_client(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    two_tenants: tuple[Built, Built],
) -> None:
    with FakeOpenAIServer() as server:
        server.script(good({"answer": "She made a blue bowl."}))
        s = with_keys(settings, llm_base_url=server.base_url, llm_model="fake-model")
        registry = CollectorRegistry()
        metrics = query_metrics(registry)
        owned: list[Any] = []
        deps = QueryDeps(
            settings=s,
            graph=graph,
            index=index,
            retriever=Retriever(graph, index, embedder, s, metrics=metrics),
            metrics=metrics,
            answerer_factory=answerer_factory(s, registry, owned),
        )
        transport = httpx.ASGITransport(app=create_app(deps, registry))
        async with httpx.AsyncClient(transport=transport, base_url="http://q") as c:
            r = await c.post("/v1/answer", headers=A, json={"question": "What did Caroline make?"})
        for client in owned:
            await client.aclose()
        assert r.status_code == 200, r.text
        assert r.json()["answer"] == "She made a blue bowl."
        (request,) = server.chat_requests()
        assert "What did Caroline make?" in json.dumps(request)
        assert "Facts:" in json.dumps(request)


async def test_async_client(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    two_tenants: tuple[Built, Built],
) -> None:
    a, _ = two_tenants
    http, _ = make_app(with_keys(settings), graph, index, embedder)
    transport = http._transport  # the app's ASGI transport
    async with AsyncGaamaClient("http://query", KEY_A, transport=transport) as c:
        res = await c.search("pottery bowl", k=3, conversation="conv1", params={"alpha": 0.5})
        assert len(res["ranked"]) == 3
        assert (await c.node(a.facts[0]))["id"] == a.facts[0]
        with pytest.raises(GaamaAPIError) as err:
            await c.node("fa_missing")
        assert err.value.status_code == 404 and "not found" in err.value.message
        with pytest.raises(GaamaAPIError) as err:
            await c.answer("q")
        assert err.value.status_code == 503 and err.value.retryable
    async with AsyncGaamaClient("http://query", "bad", transport=transport) as c:
        with pytest.raises(GaamaAPIError, match="unknown API key"):
            await c.search("q")
