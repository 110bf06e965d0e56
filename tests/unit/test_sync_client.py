"""The sync HTTP client against an httpx MockTransport."""

from __future__ import annotations

import json

import httpx
import pytest

from gaama.client import GaamaAPIError, GaamaClient


def test_sync_client_against_a_mock_transport() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/turns":
            return httpx.Response(202, json={"accepted": 1, "episode_ids": ["ep_1"]})
        if request.url.path == "/v1/search":
            return httpx.Response(422, json={"error": "k: Input should be <= 200"})
        return httpx.Response(502, text="bad gateway")

    c = GaamaClient(
        "http://query",
        "secret",
        ingest_url="http://ingest/",
        transport=httpx.MockTransport(handler),
    )
    turn = {
        "conversation": "c1",
        "speaker": "Ann",
        "text": "hi",
        "timestamp": "2023-05-08T10:00:00Z",
    }
    assert c.add_turns(turn) == ["ep_1"]
    assert json.loads(seen[0].content) == {"turns": [turn]}
    assert str(seen[0].url) == "http://ingest/v1/turns"
    assert seen[0].headers["authorization"] == "Bearer secret"
    with pytest.raises(GaamaAPIError) as err:
        c.search("q", k=500, subject="Ann", budget=50)
    assert err.value.status_code == 422 and err.value.message.startswith("k:")
    assert not err.value.retryable
    assert json.loads(seen[1].content) == {
        "query": "q",
        "k": 500,
        "mode": "gaama",
        "budget": 50,
        "scope": {"subject": "Ann"},
    }
    with pytest.raises(GaamaAPIError) as err:
        c.node("x")
    assert err.value.status_code == 502 and err.value.message == "bad gateway"
    c.close()
