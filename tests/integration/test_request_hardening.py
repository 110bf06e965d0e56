"""The query service's edges against the real Redis: auth hardening (key size, throttling,
rotation without restart), protected /metrics, optional docs, per-request cost bounds and strict
input types. The uvicorn test at the end runs the real HTTP server, where oversized headers used
to drop the connection."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import httpx
import pytest
import uvicorn
from pydantic import SecretStr

from gaama.config import RequestLimits, Settings, hash_api_key
from gaama.embed import MiniLMEmbedder
from gaama.errors import ConfigError
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from tests.integration.test_query_api import KEY_A, A, make_app, with_keys
from tests.integration.test_search import Built, build_memory

pytestmark = pytest.mark.requires_stack


@pytest.fixture
async def memory(graph: GraphStore, embedder: MiniLMEmbedder) -> Built:
    return await build_memory(graph, embedder, "tenant-a")


def _client(settings: Settings, graph, index, embedder) -> httpx.AsyncClient:
    client, _ = make_app(settings, graph, index, embedder)
    return client


# --- configuration ------------------------------------------------------------------------------


# --- auth ---------------------------------------------------------------------------------------


async def test_oversized_key_is_a_quick_401(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    async with _client(with_keys(settings), graph, index, embedder) as c:
        r = await c.post("/v1/search", headers={"X-API-Key": "k" * 100_000}, json={"query": "q"})
    assert r.status_code == 401 and "longer than" in r.json()["error"]


async def test_failed_attempts_are_throttled_per_address(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    s = with_keys(settings, auth_fail_limit=5, auth_fail_window_s=60)
    async with _client(s, graph, index, embedder) as c:
        codes = [
            (await c.post("/v1/search", headers={"X-API-Key": f"guess-{i}"}, json={"query": "q"}))
            for i in range(8)
        ]
        assert [r.status_code for r in codes] == [401] * 5 + [429] * 3
        assert int(codes[-1].headers["Retry-After"]) > 0
        # The right key from the throttled address is still served: only failing attempts
        # meet the throttle, so one bad client behind a shared address locks nobody out.
        assert (await c.post("/v1/search", headers=A, json={"query": "q"})).status_code == 200


async def test_a_bad_client_behind_a_trusted_proxy_locks_nobody_else_out(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    # Every request reaches the service from the ingress (the test transport's 127.0.0.1); the
    # ingress names the real client in X-Forwarded-For.
    s = with_keys(settings, auth_fail_limit=20, auth_fail_window_s=60)
    s = s.model_copy(update={"trusted_proxies": ["127.0.0.0/8"]})
    bad = {"X-Forwarded-For": "203.0.113.7"}
    good = {"X-Forwarded-For": "198.51.100.9"}
    body = {"query": "q"}
    async with _client(s, graph, index, embedder) as c:
        for i in range(20):
            r = await c.post("/v1/search", headers={**bad, "X-API-Key": f"guess-{i}"}, json=body)
            assert r.status_code == 401
        r = await c.post("/v1/search", headers={**bad, "X-API-Key": "guess-x"}, json=body)
        assert r.status_code == 429
        # Another client behind the same proxy: its mistakes are its own, its key works.
        r = await c.post("/v1/search", headers={**good, "X-API-Key": "typo"}, json=body)
        assert r.status_code == 401
        assert (await c.post("/v1/search", headers={**good, **A}, json=body)).status_code == 200
        # A client cannot escape its count by prepending an address of its choice.
        spoofed = {"X-Forwarded-For": "192.0.2.1, 203.0.113.7", "X-API-Key": "guess-y"}
        assert (await c.post("/v1/search", headers=spoofed, json=body)).status_code == 429


async def test_forwarding_headers_from_an_untrusted_peer_are_ignored(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    s = with_keys(settings, auth_fail_limit=3, auth_fail_window_s=60)
    body = {"query": "q"}
    async with _client(s, graph, index, embedder) as c:
        codes = []
        for i in range(5):  # a new forwarded address each time: all counted under the peer
            h = {"X-Forwarded-For": f"203.0.113.{i}", "X-API-Key": f"guess-{i}"}
            codes.append((await c.post("/v1/search", headers=h, json=body)).status_code)
        assert codes == [401] * 3 + [429] * 2


async def test_keys_rotate_without_restart(
    tmp_path: Path,
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    memory: Built,
) -> None:
    path = tmp_path / "keys.json"

    def publish(*entries: tuple[str, str, bool]) -> None:
        data = [
            {"key_sha256": hash_api_key(k), "tenant": t, "disabled": off} for k, t, off in entries
        ]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)  # atomic, as a mounted Secret or a config tool updates it

    publish(("old-key", "tenant-a", False))
    # No tenant quota: the traffic below is about rotation, and a fast machine sends it faster
    # than the default rate, which would answer 429 for a reason this test is not about.
    s = settings.model_copy(
        update={"api_keys_file": str(path), "api_keys_reload_s": 0.1, "tenant_rate": 0.0}
    )
    old, new = {"X-API-Key": "old-key"}, {"X-API-Key": "new-key"}
    body = {"query": "pottery"}
    async with _client(s, graph, index, embedder) as c:
        stop = asyncio.Event()
        codes: dict[str, list[int]] = {"old": [], "new": []}

        async def traffic() -> None:  # requests keep flowing during the rotation
            while not stop.is_set():
                for name, h in (("old", old), ("new", new)):
                    codes[name].append(
                        (await c.post("/v1/search", headers=h, json=body)).status_code
                    )
                await asyncio.sleep(0.02)

        # Before the rotation, checked directly (the traffic task may start late on a busy box).
        assert (await c.post("/v1/search", headers=old, json=body)).status_code == 200
        assert (await c.post("/v1/search", headers=new, json=body)).status_code == 401
        task = asyncio.create_task(traffic())
        await asyncio.sleep(0.3)
        publish(("old-key", "tenant-a", False), ("new-key", "tenant-a", False))
        await asyncio.sleep(0.4)
        both = (await c.post("/v1/search", headers=new, json=body)).status_code
        publish(("old-key", "tenant-a", True), ("new-key", "tenant-a", False))
        await asyncio.sleep(0.4)
        path.write_text("{not json")  # a broken file keeps the keys in force
        await asyncio.sleep(0.4)
        stop.set()
        await task
        assert both == 200
        assert (await c.post("/v1/search", headers=old, json=body)).status_code == 403
        assert (await c.post("/v1/search", headers=new, json=body)).status_code == 200
    # While requests flowed, every answer was one a key in force at that moment gives.
    assert set(codes["old"]) <= {200, 403} and set(codes["new"]) <= {200, 401}
    assert codes["new"] and codes["new"][-1] == 200


def test_a_bad_key_file_fails_at_start_up(tmp_path: Path, settings: Settings) -> None:
    from services.runtime.auth import KeyRing

    path = tmp_path / "keys.json"
    path.write_text(json.dumps([{"key_sha256": "x", "tenant": "t"}]))
    with pytest.raises(ConfigError, match="GAAMA_API_KEYS_FILE"):
        KeyRing(settings.model_copy(update={"api_keys_file": str(path)}))


# --- metrics and docs ---------------------------------------------------------------------------


async def test_metrics_token_and_docs_switch(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    s = with_keys(settings, metrics_token=SecretStr("scrape-secret"), http_docs=False)
    async with _client(s, graph, index, embedder) as c:
        assert (await c.get("/metrics")).status_code == 401
        assert (await c.get("/metrics", headers=A)).status_code == 401  # an API key is not it
        r = await c.get("/metrics", headers={"Authorization": "Bearer scrape-secret"})
        assert r.status_code == 200 and "gaama_query" in r.text
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert (await c.get(path)).status_code == 404
    async with _client(with_keys(settings), graph, index, embedder) as c:
        assert (await c.get("/openapi.json")).status_code == 200
        text = (await c.get("/metrics")).text
    # No metric names a tenant: label names never include one.
    assert "tenant=" not in text and "tenant-a" not in text


# --- request cost and strict input --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "bound"),
    [
        ({"query": "q", "k": 21}, "k = 21 is above this service's limit of 20 (GAAMA_LIMITS__K)"),
        ({"query": "q", "budget": 1001}, "budget = 1001 is above this service's limit of 1000"),
        (
            {"query": "q", "params": {"hops": 4}},
            "params.hops = 4 is above this service's limit of 2",
        ),
        ({"query": "q", "params": {"max_expanded": 100000}}, "GAAMA_LIMITS__MAX_EXPANDED"),
        ({"query": "q", "params": {"seeds": 41}}, "GAAMA_LIMITS__SEEDS"),
        ({"query": "q", "params": {"budget_words": 5000}}, "GAAMA_LIMITS__BUDGET_WORDS"),
    ],
)
async def test_request_cost_is_bounded_by_the_operator(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    body: dict[str, object],
    bound: str,
) -> None:
    s = with_keys(settings, limits=RequestLimits())
    async with _client(s, graph, index, embedder) as c:
        r = await c.post("/v1/search", headers=A, json=body)
    assert r.status_code == 422 and bound in r.json()["error"], r.text


async def test_raised_limits_and_cheaper_requests_pass(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    memory: Built,
) -> None:
    s = with_keys(settings, limits=RequestLimits(k=50, hops=3))
    async with _client(s, graph, index, embedder) as c:
        for body in (
            {"query": "pottery", "k": 50, "params": {"hops": 3}},
            {"query": "pottery", "k": 5, "budget": 100, "params": {"hops": 1, "seeds": 10}},
        ):
            r = await c.post("/v1/search", headers=A, json=body)
            assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "q", "k": True}, "k"),
        ({"query": "q", "k": "5"}, "k"),
        ({"query": "q", "budget": 100.0}, "budget"),
        ({"query": "q", "params": {"alpha": True}}, "params.alpha"),
        ({"query": "q", "scope": {"conversation": "a\u0000b"}}, "scope.conversation"),
        ({"query": "q", "scope": {"subject": "x\u001b"}}, "scope.subject"),
        ({"query": "q", "scope": {"subject": ""}}, "scope.subject"),
        ({"query": "a\ud800b"}, "query"),
        ({"query": 5}, "query"),
    ],
)
async def test_loose_types_are_refused(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    body: dict[str, object],
    field: str,
) -> None:
    async with _client(with_keys(settings), graph, index, embedder) as c:
        r = await c.post(
            "/v1/search",
            headers={**A, "content-type": "application/json"},
            content=json.dumps(body).encode(),
        )
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(field), r.text


async def test_not_found_quotes_a_bounded_prefix(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    async with _client(with_keys(settings), graph, index, embedder) as c:
        r = await c.get(f"/v1/nodes/{'x' * 10_000}", headers=A)
    assert r.status_code == 404 and len(r.json()["error"]) < 200


# --- the real HTTP server -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_huge_headers_get_an_answer_not_a_dropped_connection(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    from services.query.main import server_config

    client, _ = make_app(with_keys(settings), graph, index, embedder)
    app = client._transport.app  # type: ignore[attr-defined]
    port = _free_port()
    server = uvicorn.Server(server_config(app, "127.0.0.1", port))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            r = await c.post("/v1/search", headers={"X-API-Key": "k" * 1_000_000}, json={})
            assert r.status_code in (401, 431), r.text
            ok = await c.post("/v1/search", headers={"X-API-Key": KEY_A}, json={"query": "q"})
            assert ok.status_code == 200
    finally:
        server.should_exit = True
        await task
        await client.aclose()
