"""End-user tokens through the MCP gateway, end to end: real ingest, query and gateway processes
reading their signing keys from the key file. An agent holding one end user's token remembers
and finds that user's memory; reaching another subject is refused (403) with nothing read or
written, and a forged token is refused at the gateway (401) before any tool runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gaama import ids, tokens
from gaama.config import ApiKey, Settings
from gaama.store.graph import GraphStore
from tests.integration.test_mcp_e2e import found, over_http, text
from tests.support.services import ServiceProcess, api_keys, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

KEY = "mcp-token-tenant-key"
SECRET = tokens.new_secret()
SIGNER = tokens.SigningKey.from_text("t-a1", "tenant-a", SECRET)
ME, OTHER = "user-42", "user-43"


@pytest.fixture
def stack_services(settings: Settings, topics, index, tmp_path: Path) -> Iterator[dict[str, Any]]:
    s = settings.model_copy(update={"api_keys": [ApiKey(**k) for k in api_keys((KEY, "tenant-a"))]})
    key_file = tmp_path / "keys.json"
    entry = {"kid": SIGNER.kid, "tenant": "tenant-a", "secret": SECRET}
    key_file.write_text(json.dumps({"api_keys": [], "signing_keys": [entry]}))
    env = {"GAAMA_API_KEYS_FILE": str(key_file)}
    ingest = ServiceProcess("ingest", s, tmp_path, **env).start()
    query = ServiceProcess("query", s, tmp_path, **env).start()
    urls = {"GAAMA_QUERY_URL": query.url, "GAAMA_INGEST_URL": ingest.url}
    mcp = ServiceProcess("mcp", s, tmp_path, **urls, **env)
    try:
        yield {"mcp": mcp.start(), "urls": urls}
    finally:
        for p in (mcp, query, ingest):
            p.stop()


def token(perms: tuple[str, ...] = ("read", "write")) -> str:
    return tokens.mint(SIGNER, subject=ME, permissions=perms, ttl_s=900)


async def test_a_subject_token_reaches_its_own_memory_alone(
    stack_services: dict[str, Any], graph: GraphStore
) -> None:
    url = stack_services["mcp"].url
    async with over_http(url, KEY) as tenant, over_http(url, token()) as agent:
        # Another end user's memory, written with the tenant key.
        theirs = await tenant.call_tool(
            "remember",
            {
                "conversation": "c-other",
                "subject": OTHER,
                "turns": [{"text": "My parrot Kiwi learned to whistle.", "turn_id": "o1"}],
                "speaker": "Bo",
            },
        )
        assert not theirs.is_error, text(theirs)
        [their_ep] = theirs.structured_content["episode_ids"]

        # The agent's attempts at the other user: refused, nothing written.
        refused = [
            (
                "remember",
                {
                    "conversation": "c-me",
                    "subject": OTHER,
                    "turns": [{"text": "x", "turn_id": "r1"}],
                },
            ),
            ("search_memory", {"query": "parrot", "scope": {"subject": OTHER}}),
            ("list_memories", {"subject": OTHER}),
            ("forget", {"subject": OTHER}),
        ]
        for tool, args in refused:
            r = await agent.call_tool(tool, args)
            assert r.is_error and "HTTP 403" in text(r), (tool, text(r))
        r = await agent.call_tool("get_memory", {"node_id": their_ep})
        assert r.is_error and "not found" in text(r)

        # Its own turns, without naming a subject: stored under the token's.
        mine = await agent.call_tool(
            "remember",
            {
                "conversation": "c-me",
                "turns": [{"text": "I adopted a beagle called Biscuit.", "turn_id": "m1"}],
                "speaker": "Ann",
            },
        )
        assert not mine.is_error, text(mine)
        [my_ep] = mine.structured_content["episode_ids"]
        hit = await wait_for(lambda: found(agent, "What dog did I adopt?", my_ep), timeout=90)
        assert hit["kind"] == "episode"
        await wait_for(lambda: found(tenant, "parrot Kiwi whistle", their_ep), timeout=90)

        r = await agent.call_tool("search_memory", {"query": "parrot Kiwi whistle", "k": 20})
        seen = {i["id"] for i in r.structured_content["ranked"] + r.structured_content["memory"]}
        assert my_ep in seen and their_ep not in seen
        listed = await agent.call_tool("list_memories", {"limit": 200})
        assert {m["subject"] for m in listed.structured_content["items"]} == {ME}

    stored = await graph.get_fields("tenant-a", [my_ep], ["subject"])
    assert stored[my_ep][0] == ME.encode()
    # The refused turn came before the stored one in the same conversation: never written.
    refused_ep = ids.episode_id("tenant-a", "c-me", "r1")
    assert await graph.get_nodes("tenant-a", [refused_ep]) == {}
    # The other user's memory is intact.
    assert their_ep in await graph.get_nodes("tenant-a", [their_ep])


async def test_a_forged_or_read_only_token(stack_services: dict[str, Any]) -> None:
    url = stack_services["mcp"].url
    head, body, _ = token().split(".")
    other = tokens.SigningKey.from_text(SIGNER.kid, "tenant-a", tokens.new_secret())
    forged = tokens.mint(other, subject=ME, permissions=["read"], ttl_s=60)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=10) as http:
        for bad in (forged, f"{head}.{body}.AAAA"):
            r = await http.post(
                f"{url}/mcp", json=ping, headers={**accept, "Authorization": f"Bearer {bad}"}
            )
            assert r.status_code == 401 and "token refused" in r.json()["error"]
    async with over_http(url, token(("read",))) as reader:
        r = await reader.call_tool("remember", {"conversation": "c", "text": "hello"})
        assert r.is_error and "HTTP 403" in text(r) and "'write'" in text(r)
        ok = await reader.call_tool("search_memory", {"query": "anything"})
        assert not ok.is_error, text(ok)
