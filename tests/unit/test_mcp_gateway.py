"""The MCP gateway against a scripted REST API (``httpx.MockTransport``), through the SDK's own
in-memory client: requests it makes, results it builds, every failure as a tool error with a
reason, and the metrics. The real stack is exercised in tests/integration/test_mcp_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mcp import Client
from prometheus_client import CollectorRegistry

from gaama.metrics import MCP_ERROR_REASONS, mcp_metrics
from services.mcp.app import TOOLS, Gateway, build_server
from services.mcp.settings import McpSettings, load_mcp_settings

Handler = Callable[[httpx.Request], httpx.Response]

ITEM = {
    "id": "fa_0123456789abcdef01234567",
    "kind": "fact",
    "text": "Ann adopted a puppy named Rex.",
    "time": 1709576400.0,
    "conversation": "c1",
    "sim": 0.9,
    "ppr": 0.1,
    "score": 0.91,
    "provenance": [{"episode_id": "ep_0123456789abcdef01234567", "turn_id": "D1:1"}],
}
STATS = {"timings_ms": {}, "subgraph_nodes": 3, "ppr_iterations": 4}


class Api:
    """A scripted REST API that records what it was asked."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)


def gateway(api: Handler, registry: CollectorRegistry | None = None, **over: Any) -> Gateway:
    settings = McpSettings(query_url="http://query.test", ingest_url="http://ingest.test", **over)
    return Gateway(
        settings,
        mcp_metrics(registry or CollectorRegistry(), TOOLS),
        fixed_key="the-key",
        pool=httpx.MockTransport(api),
    )


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content)


async def test_tools_are_listed_with_bounded_strict_schemas():
    async with Client(build_server(gateway(Api(lambda r: httpx.Response(500))))) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    for t in tools.values():
        assert t.input_schema["additionalProperties"] is False
        assert t.output_schema is not None and t.description
    search = tools["search_memory"].input_schema["properties"]
    assert search["query"]["maxLength"] == 2000 and search["k"]["maximum"] == 200
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["search_memory"].annotations.read_only_hint is True
    assert "tenant" not in json.dumps([t.input_schema for t in tools.values()])


async def test_remember_posts_turns_with_the_callers_key():
    def ingest(r: httpx.Request) -> httpx.Response:
        n = len(json.loads(r.content)["turns"])
        return httpx.Response(
            202, json={"accepted": n, "episode_ids": [f"ep_{i}" for i in range(n)]}
        )

    api = Api(ingest)
    async with Client(build_server(gateway(api))) as c:
        one = await c.call_tool(
            "remember",
            {"conversation": "c1", "text": "I adopted a puppy", "subject": "user/42"},
        )
        many = await c.call_tool(
            "remember",
            {
                "conversation": "c1",
                "speaker": "Ann",
                "timestamp": "2024-03-04T18:20:00Z",
                "turns": [{"text": "a"}, {"text": "b", "speaker": "Bob", "turn_id": "t2"}],
            },
        )
    assert not one.is_error and one.structured_content == {"accepted": 1, "episode_ids": ["ep_0"]}
    assert many.structured_content["accepted"] == 2
    first, second = api.requests
    assert str(first.url) == "http://ingest.test/v1/turns"
    assert first.headers["authorization"] == "Bearer the-key"
    [turn] = json.loads(first.content)["turns"]
    assert turn["speaker"] == "user" and turn["subject"] == "user/42" and turn["timestamp"]
    a, b = json.loads(second.content)["turns"]
    assert (a["speaker"], a["timestamp"]) == ("Ann", "2024-03-04T18:20:00Z")
    assert (b["speaker"], b["turn_id"]) == ("Bob", "t2")


async def test_search_returns_structured_items_with_provenance_and_text():
    api = Api(
        lambda r: httpx.Response(
            200,
            json={"memory": [ITEM], "ranked": [ITEM], "words": 6, "mode": "gaama", "stats": STATS},
        )
    )
    async with Client(build_server(gateway(api))) as c:
        r = await c.call_tool(
            "search_memory",
            {"query": "pets?", "k": 5, "budget": 200, "scope": {"subject": "user/42"}},
        )
    assert not r.is_error
    body = json.loads(api.requests[0].content)
    assert body == {
        "query": "pets?",
        "k": 5,
        "mode": "gaama",
        "budget": 200,
        "scope": {"subject": "user/42"},
    }
    [item] = r.structured_content["memory"]
    assert item["provenance"] == ITEM["provenance"] and item["date"] == "2024-03-04T18:20:00Z"
    assert "Rex" in text(r) and "D1:1" in text(r)


async def test_search_passes_a_token_budget_on():
    reply = {"memory": [ITEM], "ranked": [], "words": 6, "tokens": 9, "mode": "gaama"}
    api = Api(lambda r: httpx.Response(200, json={**reply, "stats": STATS}))
    async with Client(build_server(gateway(api))) as c:
        r = await c.call_tool(
            "search_memory", {"query": "pets?", "budget": 50, "budget_unit": "tokens"}
        )
        bad = await c.call_tool("search_memory", {"query": "pets?", "budget_unit": "chars"})
    body = json.loads(api.requests[0].content)
    assert (body["budget"], body["budget_unit"]) == (50, "tokens")
    assert r.structured_content["tokens"] == 9 and "9 tokens" in text(r)
    assert bad.is_error and "budget_unit" in text(bad) and len(api.requests) == 1


async def test_list_memories_and_forget_follow_the_contract():
    forget_calls = []

    def handler(r: httpx.Request) -> httpx.Response:
        if r.url.path == "/v1/memories":
            item = {k: ITEM[k] for k in ("id", "kind", "text", "time", "conversation")}
            item |= {"subject": "", "turn_id": "", "speaker": ""}
            return httpx.Response(200, json={"items": [item], "next_cursor": "abc"})
        if r.method == "DELETE":
            forget_calls.append(r.url.raw_path.decode())
            return httpx.Response(202, json={"request_id": "rq1"})
        if r.url.path == "/v1/forget/rq1":
            done = len([x for x in api.requests if x.url.path == "/v1/forget/rq1"]) > 1
            status = (
                {"status": "done", "removed": {"episode": 3}}
                if done
                else {"status": "pending", "removed": {}}
            )
            return httpx.Response(200, json=status)
        return httpx.Response(404, json={"error": "no route"})

    api = Api(handler)
    async with Client(build_server(gateway(api))) as c:
        page = await c.call_tool(
            "list_memories", {"subject": "user/42", "kind": "fact", "limit": 10}
        )
        gone = await c.call_tool("forget", {"subject": "user/42"})
        both = await c.call_tool("forget", {"subject": "a", "conversation": "b"})
    assert page.structured_content["next_cursor"] == "abc"
    assert dict(api.requests[0].url.params) == {"limit": "10", "subject": "user/42", "kind": "fact"}
    assert forget_calls == ["/v1/subjects/user%2F42"]
    assert gone.structured_content == {
        "request_id": "rq1",
        "status": "done",
        "removed": {"episode": 3},
    }
    assert both.is_error and "not both" in text(both)


@pytest.mark.parametrize(
    ("status", "error", "reason", "words"),
    [
        (401, "unknown API key", "unauthorized", "(HTTP 401): unknown API key"),
        (403, "this API key is disabled", "unauthorized", "HTTP 403"),
        (404, "node 'x' not found", "not_found", "not found"),
        (422, "k: above the limit 20 (GAAMA_LIMITS__K)", "invalid", "GAAMA_LIMITS__K"),
        (429, "slow down", "throttled", "retry later"),
        (503, "answering needs an LLM and none is configured", "unavailable", "search_memory"),
        (500, "boom", "upstream", "HTTP 500"),
    ],
)
async def test_api_errors_become_tool_errors_and_are_counted(status, error, reason, words):
    registry = CollectorRegistry()
    api = Api(lambda r: httpx.Response(status, json={"error": error}))
    async with Client(build_server(gateway(api, registry))) as c:
        r = await c.call_tool("answer", {"question": "what pet?"})
        assert r.is_error and words in text(r)
        assert len(text(r)) < 700
        ok = await c.list_tools()  # still serving
    assert ok.tools
    errors = registry.get_sample_value(
        "gaama_mcp_tool_errors_total", {"tool": "answer", "reason": reason}
    )
    assert errors == 1
    assert registry.get_sample_value("gaama_mcp_tool_calls_total", {"tool": "answer"}) == 1


@pytest.mark.parametrize(
    ("exc", "reason", "words"),
    [
        (httpx.ConnectError("Connection refused"), "unavailable", "cannot reach the query service"),
        (httpx.ReadTimeout("timed out"), "timeout", "did not answer in time"),
    ],
)
async def test_unreachable_api_is_a_tool_error(exc, reason, words):
    registry = CollectorRegistry()

    def fail(r: httpx.Request) -> httpx.Response:
        raise exc

    async with Client(build_server(gateway(Api(fail), registry))) as c:
        r = await c.call_tool("get_memory", {"node_id": "fa_1"})
    assert r.is_error and words in text(r)
    assert (
        registry.get_sample_value(
            "gaama_mcp_tool_errors_total", {"tool": "get_memory", "reason": reason}
        )
        == 1
    )


@pytest.mark.parametrize(
    ("tool", "args", "words"),
    [
        ("search_memory", {}, "query: Field required"),
        ("search_memory", {"query": ""}, "query: String should have at least 1 character"),
        ("search_memory", {"query": "x" * 2001}, "query: String should have at most 2000"),
        ("search_memory", {"query": "x", "k": "5"}, "k: Input should be a valid integer"),
        ("search_memory", {"query": "x", "k": True}, "k: Input should be a valid integer"),
        ("search_memory", {"query": "x", "k": 0}, "k: Input should be greater than or equal to 1"),
        ("search_memory", {"query": "x", "tenant": "other"}, "never from arguments"),
        ("search_memory", {"query": "x", "scope": {"tenant": "t"}}, "scope.tenant"),
        ("remember", {"conversation": "a/b", "text": "x"}, "conversation: Value error"),
        ("remember", {"conversation": "c", "text": "x", "timestamp": "soon"}, "timestamp"),
        ("remember", {"conversation": "c"}, "give `text`"),
        ("remember", {"conversation": "c", "text": "x", "turns": [{"text": "y"}]}, "not both"),
        ("get_memory", {"node_id": "../v1/search"}, "node_id: String should match pattern"),
        ("forget", {}, "exactly one"),
        ("nonexistent", {}, "unknown tool 'nonexistent'; the tools are remember"),
    ],
)
async def test_bad_arguments_name_the_problem_and_the_server_keeps_serving(tool, args, words):
    registry = CollectorRegistry()
    api = Api(lambda r: httpx.Response(500, json={"error": "should not be called"}))
    async with Client(build_server(gateway(api, registry))) as c:
        r = await c.call_tool(tool, args)
        assert r.is_error, text(r)
        assert words in text(r), text(r)
        assert "errors.pydantic.dev" not in text(r)
        assert (await c.list_tools()).tools
    assert not api.requests  # refused before any REST call
    label = tool if tool in TOOLS else "unknown"
    reasons = {
        reason: registry.get_sample_value(
            "gaama_mcp_tool_errors_total", {"tool": label, "reason": reason}
        )
        for reason in MCP_ERROR_REASONS
    }
    assert sum(reasons.values()) == 1
    assert reasons["unknown_tool" if label == "unknown" else "invalid"] == 1


def test_stdio_needs_the_key_and_urls_are_checked(monkeypatch):
    monkeypatch.delenv("GAAMA_API_KEY", raising=False)
    with pytest.raises(Exception, match="GAAMA_API_KEY is not set"):
        load_mcp_settings("stdio")
    monkeypatch.setenv("GAAMA_QUERY_URL", "redis://nope")
    with pytest.raises(Exception, match=r"GAAMA_QUERY_URL: .*http:// or https://"):
        load_mcp_settings("http")
    monkeypatch.setenv("GAAMA_QUERY_URL", "https://memory.example.com/")
    monkeypatch.setenv("GAAMA_API_KEY", "k")
    s = load_mcp_settings("stdio")
    assert s.query_url == "https://memory.example.com" and s.api_key is not None
