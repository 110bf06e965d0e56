"""Token budgets on POST /v1/search and the context call POST /v1/context, over HTTP (ASGI
transport) against the real Redis: shape, budget, determinism, scope and tenant isolation,
validation; the SDK's get_context and the CLI's ``gaama context``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gaama.client import AsyncGaamaClient, GaamaAPIError
from gaama.config import Settings
from gaama.embed import MiniLMEmbedder
from gaama.ids import episode_id, fact_id
from gaama.model import Node, NodeKind
from gaama.retrieval.context import CURRENT, ENDED, EPISODES
from gaama.retrieval.tokencount import TokenCounter
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from tests.integration.test_query_api import KEY_A, A, B, make_app, with_keys
from tests.integration.test_search import DAY, T0, Built, build_memory
from tests.support.services import ServiceProcess

pytestmark = pytest.mark.requires_stack

API = tuple[httpx.AsyncClient, CollectorRegistry]
#: Japanese turns: no spaces, mostly kana (which WordPiece alone counts as one [UNK] a run).
JA = [
    "きのうはともだちといっしょにおすしをたべにいきました。とてもおいしかったです。",
    "わたしはまいにちこうえんでいぬとさんぽをしています。いぬのなまえはポチです。",
    "らいしゅうはおかあさんのたんじょうびなので、ケーキをやくつもりです。",
    "さいきんピアノをならいはじめました。まだむずかしいけれど、たのしいです。",
]
MOVED = "Caroline lives in Lisbon."  # a fact that holds
LEFT = "Caroline lives in Porto."  # the fact it ended


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


async def _japanese(graph: GraphStore, embedder: MiniLMEmbedder, tenant: str) -> list[str]:
    vecs = await embedder.embed(JA)
    out = []
    for n, (text, vec) in enumerate(zip(JA, vecs, strict=True)):
        eid = episode_id(tenant, "conv-ja", f"J{n}")
        node = Node(
            id=eid,
            tenant=tenant,
            kind=NodeKind.EPISODE,
            text=text,
            time=T0 + n,
            conversation="conv-ja",
            subject="Yuki",
            turn_id=f"J{n}",
            speaker="Yuki",
            vector=vec.tolist(),
        )
        assert await graph.append_episode(node)
        out.append(eid)
    return out


async def _moved(graph: GraphStore, embedder: MiniLMEmbedder, tenant: str) -> tuple[str, str]:
    vecs = await embedder.embed([MOVED, LEFT])
    now, old = fact_id(tenant, MOVED), fact_id(tenant, LEFT)
    nodes = [
        Node(
            id=now,
            tenant=tenant,
            kind=NodeKind.FACT,
            text=MOVED,
            time=T0 + 10 * DAY,
            conversation="conv1",
            subject="Caroline",
            vector=vecs[0].tolist(),
            extra={"valid_from": str(T0 + 10 * DAY)},
        ),
        Node(
            id=old,
            tenant=tenant,
            kind=NodeKind.FACT,
            text=LEFT,
            time=T0,
            conversation="conv1",
            subject="Caroline",
            vector=vecs[1].tolist(),
            extra={"valid_from": str(T0), "valid_to": str(T0 + 10 * DAY), "superseded_by": now},
        ),
    ]
    await graph.write(tenant, nodes, [])
    return now, old


@pytest.fixture
async def api(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> AsyncIterator[API]:
    client, registry = make_app(with_keys(settings), graph, index, embedder)
    async with client:
        yield client, registry


@pytest.fixture
async def memory(graph: GraphStore, embedder: MiniLMEmbedder) -> dict[str, Any]:
    a = await build_memory(graph, embedder, "tenant-a")
    b = await build_memory(graph, embedder, "tenant-b")
    return {
        "a": a,
        "b": b,
        "ja": await _japanese(graph, embedder, "tenant-a"),
        "moved": await _moved(graph, embedder, "tenant-a"),
    }


def _ids(b: Built) -> set[str]:
    return {*b.episodes.values(), *b.facts, b.reflection, *b.concepts.values()}


async def test_search_token_budget(api: API, memory: dict[str, Any], counter: TokenCounter) -> None:
    c, _ = api
    q = {"query": "What did Caroline make in her pottery class?"}
    r = (await c.post("/v1/search", headers=A, json=q)).json()
    assert r["budget_unit"] == "words" and r["tokens"] is None  # the default is unchanged
    for budget in (20, 60, 200):
        body = {**q, "budget": budget, "budget_unit": "tokens"}
        r = (await c.post("/v1/search", headers=A, json=body)).json()
        spent = sum(counter.counts([i["text"] for i in r["memory"]]))
        assert r["budget_unit"] == "tokens" and r["memory"]
        assert r["tokens"] == spent <= budget


async def test_search_token_budget_without_spaces(
    api: API, memory: dict[str, Any], counter: TokenCounter
) -> None:
    c, _ = api
    body = {"query": "おすしをたべました", "scope": {"conversation": "conv-ja"}, "budget": 60}
    by_words = (await c.post("/v1/search", headers=A, json=body)).json()
    by_tokens = await c.post("/v1/search", headers=A, json={**body, "budget_unit": "tokens"})
    by_tokens_data = by_tokens.json()
    # A turn without spaces is one "word": a 60-word budget takes every turn, far over 60 tokens.
    assert by_words["words"] == len(JA)
    assert sum(counter.counts([i["text"] for i in by_words["memory"]])) > 60
    assert by_tokens.status_code == 200 and 0 < by_tokens_data["tokens"] <= 60
    assert len(by_tokens_data["memory"]) < len(JA)


async def test_context_shape(api: API, memory: dict[str, Any], counter: TokenCounter) -> None:
    c, _ = api
    r = await c.post(
        "/v1/context",
        headers=A,
        json={"query": "Where does Caroline live, and what did she make in pottery class?"},
    )
    assert r.status_code == 200, r.text
    data = r.json()
    assert set(data) == {"context", "items", "citations", "tokens", "query"}
    text = data["context"]
    assert text.startswith(CURRENT) and data["tokens"] == counter.count(text) <= 1000
    now, old = memory["moved"]
    cites = {v["id"]: k for k, v in data["citations"].items()}
    assert f"- [{cites[now]}] (2023-05-12) {MOVED}" in text
    # The ended fact is marked, after the facts that hold.
    assert f"[{cites[old]}] (2023-05-02 to 2023-05-12, no longer holds) {LEFT}" in text
    assert text.index(CURRENT) < text.index(ENDED) < text.index(EPISODES)
    assert [i["citation"] for i in data["items"]] == list(data["citations"])
    for item in data["items"]:
        assert data["citations"][item["citation"]] == {"id": item["id"], "kind": item["kind"]}
        assert f"[{item['citation']}]" in text
    episodes = [i for i in data["items"] if i["kind"] == "episode"]
    assert episodes and all(i["speaker"] for i in episodes)
    times = [(i["time"], i["conversation"]) for i in episodes]
    assert times == sorted(times)
    # The memory as it stood before the move: Porto held then, Lisbon was not said yet.
    then = (
        await c.post(
            "/v1/context", headers=A, json={"query": "Where does Caroline live?", "as_of": T0 + DAY}
        )
    ).json()
    assert LEFT in then["context"] and MOVED not in then["context"]
    assert ENDED not in then["context"]


async def test_context_budget_and_determinism(
    api: API, memory: dict[str, Any], counter: TokenCounter
) -> None:
    c, _ = api
    for max_tokens in (10, 40, 120, 1000):
        body = {"query": "pottery bowl camping", "max_tokens": max_tokens}
        first = await c.post("/v1/context", headers=A, json=body)
        second = await c.post("/v1/context", headers=A, json=body)
        assert first.status_code == 200, first.text
        assert first.content == second.content  # the same memory gives the same bytes
        data = first.json()
        assert data["tokens"] == counter.count(data["context"]) <= max_tokens
        if max_tokens >= 40:
            assert data["items"]
    ja = (
        await c.post(
            "/v1/context",
            headers=A,
            json={"query": "いぬのさんぽ", "max_tokens": 130, "scope": {"conversation": "conv-ja"}},
        )
    ).json()
    # Each Japanese turn's line is about 50 tokens (one word by whitespace): two fit, not four.
    assert 0 < ja["tokens"] <= 130 and 0 < len(ja["items"]) < len(JA)


async def test_context_from_messages(api: API, memory: dict[str, Any]) -> None:
    c, _ = api
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Tell me about Jon."},
        {"role": "assistant", "content": "Sure, what about him?"},
        {"role": "user", "content": "What is he opening"},
        {"role": "user", "content": "after the bank?"},
    ]
    r = await c.post("/v1/context", headers=A, json={"messages": messages})
    data = r.json()
    assert r.status_code == 200 and data["query"] == "What is he opening\nafter the bank?"
    assert "dance studio" in data["context"]


async def test_context_scope_and_tenant_isolation(api: API, memory: dict[str, Any]) -> None:
    c, _ = api
    a, b = memory["a"], memory["b"]
    mine = {"a": _ids(a) | set(memory["ja"]) | set(memory["moved"]), "b": _ids(b)}
    for headers, who in ((A, "a"), (B, "b")):
        r = await c.post("/v1/context", headers=headers, json={"query": "pottery bowl kiln"})
        data = r.json()
        seen = {i["id"] for i in data["items"]} | {v["id"] for v in data["citations"].values()}
        seen |= {p["episode_id"] for i in data["items"] for p in i["provenance"]}
        assert seen and seen <= mine[who], who
    r = await c.post(
        "/v1/context",
        headers=A,
        json={"query": "pottery bowl", "scope": {"conversation": "conv2"}},
    )
    data = r.json()
    assert data["items"] and all(i["conversation"] == "conv2" for i in data["items"])
    assert "Caroline" not in data["context"]
    r = await c.post(
        "/v1/context", headers=A, json={"query": "pottery", "scope": {"subject": "nobody"}}
    )
    assert r.status_code == 200 and r.json()["items"] == [] and r.json()["context"] == ""


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({}, "give either query or messages"),
        ({"query": "q", "messages": [{"role": "user", "content": "q"}]}, "either query"),
        ({"query": ""}, "query"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "no user message"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": "user"}]}, "messages.0.content"),
        ({"query": "q", "max_tokens": 5}, "max_tokens"),
        ({"query": "q", "max_tokens": 1001}, "GAAMA_LIMITS__BUDGET_TOKENS"),
        ({"query": "q", "max_tokens": "many"}, "max_tokens"),
        ({"query": "q", "tenant": "tenant-b"}, "tenant"),
        ({"query": "q", "scope": {"subject": ""}}, "scope.subject"),
        ({"query": "q", "as_of": -1}, "as_of"),
        ({"query": "x" * 2001}, "at most 2000"),
    ],
)
async def test_context_bad_body_is_422(api: API, body: dict[str, object], needle: str) -> None:
    c, _ = api
    r = await c.post("/v1/context", headers=A, json=body)
    assert r.status_code == 422, r.text
    assert needle in r.json()["error"]


async def test_context_needs_a_key(api: API) -> None:
    c, _ = api
    r = await c.post("/v1/context", json={"query": "q"})
    assert r.status_code == 401


async def test_sdk_get_context(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    memory: dict[str, Any],
) -> None:
    http, _ = make_app(with_keys(settings), graph, index, embedder)
    async with AsyncGaamaClient("http://query", KEY_A, transport=http._transport) as c:
        out = await c.get_context("pottery bowl", max_tokens=200, conversation="conv1")
        assert out["context"].startswith(CURRENT) and out["tokens"] <= 200
        assert all(i["conversation"] == "conv1" for i in out["items"])
        hits = await c.search("pottery bowl", budget=40, budget_unit="tokens")
        assert hits["budget_unit"] == "tokens" and 0 < hits["tokens"] <= 40
        chat = [{"role": "user", "content": "What did Jon start?"}]
        assert (await c.get_context(messages=chat))["query"] == "What did Jon start?"
        with pytest.raises(GaamaAPIError) as err:
            await c.get_context()
        assert err.value.status_code == 422 and "either query or messages" in err.value.message


@pytest.mark.slow
async def test_cli_context_against_the_query_service(
    settings: Settings, index: VectorIndex, memory: dict[str, Any], tmp_path: Path
) -> None:
    keyed = with_keys(settings)
    query = ServiceProcess("query", keyed, tmp_path).start()
    try:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "GAAMA_API_KEY": KEY_A,
            "HF_HUB_OFFLINE": "1",
        }
        argv = [sys.executable, "-m", "gaama.cli", "context", "pottery bowl", "--url", query.url]
        out = await asyncio.to_thread(
            subprocess.run, [*argv, "--max-tokens", "120"], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(CURRENT) and "tokens" in out.stderr
        raw = await asyncio.to_thread(
            subprocess.run, [*argv, "--json"], capture_output=True, text=True, env=env
        )
        data = json.loads(raw.stdout)
        assert data["tokens"] <= 1000 and data["context"] and data["citations"]
        mine = _ids(memory["a"]) | set(memory["ja"]) | set(memory["moved"])
        assert {v["id"] for v in data["citations"].values()} <= mine
    finally:
        query.stop()
