"""The query service's HTTP layer alone: CPU per ``POST /v1/search`` of the service's ASGI app
(middleware, API key, request model, handler, response body), called in-process with a
retriever that returns one fixed result of the default size (no Redis, no embedder).

    PYTHONPATH=shared:. python scripts/query-http-cost.py [requests]

Run it from two checkouts to compare their HTTP layers. The result: 20 ranked items and a packed
memory of 60 facts, 20 reflections and 80 episodes, each fact and reflection with three source
turns (a full memory at the default caps).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from typing import Any

from prometheus_client import CollectorRegistry

from gaama.config import ApiKey, RetrievalSettings, hash_api_key, load_settings
from gaama.metrics import query_metrics
from gaama.model import NodeKind
from gaama.retrieval.pack import Item, Provenance
from gaama.retrieval.request import SearchResult
from services.query.app import create_app
from services.query.handlers import QueryDeps

KEY = "http-cost-key"


def _items(kind: NodeKind, n: int, sources: int) -> list[Item]:
    return [
        Item(
            id=f"{kind.value[0]}_{i:032x}",
            kind=kind,
            text=f"[2023-05-08] a {kind.value} of about twelve words, as stored, number {i}",
            time=1_683_500_000.0 + i,
            conversation="conv-1",
            sim=1.0 / (i + 1),
            ppr=0.5 / (i + 1),
            score=1.1 / (i + 1),
            provenance=[Provenance(f"e_{i:030x}{j:02x}", f"t{i}-{j}") for j in range(sources)],
        )
        for i in range(n)
    ]


class FixedRetriever:
    def __init__(self) -> None:
        facts = _items(NodeKind.FACT, 60, 3)
        memory = facts + _items(NodeKind.REFLECTION, 20, 3) + _items(NodeKind.EPISODE, 80, 1)
        self.result = SearchResult(
            mode="gaama",
            memory=memory,
            ranked=facts[:20],
            words=1000,
            timings_ms={"embed": 1.0, "knn": 2.0, "expand": 1.0, "ppr": 1.0, "pack": 1.0},
            subgraph_nodes=300,
            ppr_iterations=20,
            params=RetrievalSettings(),
        )

    async def search(self, *args: Any, **kwargs: Any) -> SearchResult:
        return self.result


async def call(app: Any, body: bytes) -> int:
    headers = [
        (b"host", b"test"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"authorization", f"Bearer {KEY}".encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/search",
        "raw_path": b"/v1/search",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 80),
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect while the request runs
        return {}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def main(requests: int) -> None:
    settings = load_settings(
        api_keys=[ApiKey(key_sha256=hash_api_key(KEY), tenant="t1")],
        tenant_concurrency=0,
        tenant_rate=0,
    )
    registry = CollectorRegistry()
    metrics = query_metrics(registry)
    deps = QueryDeps(
        settings=settings,
        graph=None,  # type: ignore[arg-type]
        index=None,  # type: ignore[arg-type]
        retriever=FixedRetriever(),  # type: ignore[arg-type]
        metrics=metrics,
    )
    app = create_app(deps, registry)
    body = json.dumps({"query": "what did Melanie paint last year?"}).encode()
    for _ in range(200):
        assert await call(app, body) == 200
    best = float("inf")
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
        for _ in range(requests):
            await call(app, body)
        best = min(best, resource.getrusage(resource.RUSAGE_SELF).ru_utime - before)
    print(f"HTTP layer: {best / requests * 1000:.3f} ms CPU per search request (best of 5)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
