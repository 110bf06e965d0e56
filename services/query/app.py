"""HTTP routes of the query service (FastAPI); it consumes and produces no topics.

Endpoints: ``POST /v1/search``, ``POST /v1/context``, ``POST /v1/answer``,
``GET /v1/nodes/{id}`` (API key required), ``GET /metrics``, ``/healthz``, ``/readyz``;
OpenAPI at ``/openapi.json``. Errors answer ``{"error": "<message>"}`` (request validation
adds ``"detail"``, the field-by-field list).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI, Response
from prometheus_client import CollectorRegistry, Counter
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gaama.errors import StoreUnavailable
from gaama.metrics import graph_size_gauge, key_reload_metric
from services.query.auth import Reader
from services.query.explorer import register_explorer
from services.query.handlers import (
    AnswerRequest,
    AnswerResponse,
    ContextRequest,
    ContextResponse,
    NodeResponse,
    QueryDeps,
    SearchRequest,
    SearchResponse,
    handle_answer,
    handle_context,
    handle_node,
    handle_search,
    redis_health,
    within,
)
from services.query.routes import register_memory_routes
from services.runtime.admission import Admission, tenant_metrics
from services.runtime.auth import Authenticator
from services.runtime.http import BodyLimit, add_ops_routes, install_error_handlers
from services.runtime.tracing import TraceRequests

log = logging.getLogger("gaama.query")

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]
ENDPOINTS = (
    "/v1/search",
    "/v1/context",
    "/v1/answer",
    "/v1/nodes/{node_id}",
    "/v1/conversations/{conversation_id}",
    "/v1/subjects/{subject_id:path}",
    "/v1/tenant",
    "/v1/forget/{request_id}",
    "/v1/memories",
    "/v1/export",
    "/v1/audit",
)


def create_app(
    deps: QueryDeps, registry: CollectorRegistry, *, lifespan: Lifespan | None = None
) -> FastAPI:
    """The query service's FastAPI app.

    Args:
        deps: Stores, retriever, metrics and the optional LLM answerer.
        registry: The registry ``deps.metrics`` lives on; ``/metrics`` exposes it.
        lifespan: Start-up/shutdown hook (``main.py`` opens and closes clients with it).
    """
    docs = deps.settings.http_docs
    app = FastAPI(
        title="GAAMA query",
        version="0.1.0",
        description="Graph-augmented long-term memory: search, answer, inspect nodes.",
        lifespan=lifespan,
        openapi_url="/openapi.json" if docs else None,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.state.deps = deps
    app.state.auth = Authenticator(deps.settings, key_reload_metric("query", registry))
    s = deps.settings
    app.state.admission = Admission(
        s.tenant_concurrency, s.tenant_rate, s.tenant_burst, tenant_metrics("query", registry)
    )
    metrics = deps.metrics
    gauge = graph_size_gauge("query", registry)
    for endpoint in ENDPOINTS:
        metrics.requests.labels(endpoint, "200")

    app.add_middleware(CountRequests, counter=metrics.requests)
    install_error_handlers(app, deps.settings, metrics.errors, log)
    app.add_middleware(BodyLimit, limit=deps.settings.http_max_body_bytes)
    app.add_middleware(TraceRequests)

    @app.post("/v1/search", response_model=SearchResponse)
    async def search(body: SearchRequest, who: Reader) -> Response:
        """Packed memory and the top-k ranking for a query, from the caller's tenant (a
        token's: its subject and conversation)."""
        return _json(await handle_search(within(body, who), who.tenant, deps))

    @app.post("/v1/context", response_model=ContextResponse)
    async def context(body: ContextRequest, who: Reader) -> Response:
        """A prompt-ready block of the caller's memory (a token's: its subject and
        conversation) for a query or a chat, within a token budget: current facts with dates,
        reflections, then turns in time order, each cited."""
        return _json(await handle_context(within(body, who), who.tenant, deps))

    @app.post("/v1/answer", response_model=AnswerResponse)
    async def answer(body: AnswerRequest, who: Reader) -> Response:
        """An LLM answer from the packed memory (503 when no LLM is configured)."""
        return _json(await handle_answer(within(body, who), who.tenant, deps))

    @app.get("/v1/nodes/{node_id}", response_model=NodeResponse)
    async def node(node_id: str, who: Reader) -> NodeResponse:
        """One node of the caller's tenant (a token's: in its scope) with its neighbours; 404
        for any other id."""
        return await handle_node(node_id, who.tenant, deps, who)

    register_memory_routes(app, deps)
    if deps.settings.explorer:
        register_explorer(app)

    async def refresh_gauges() -> None:
        try:
            for kind, n in (await deps.index.count()).items():
                gauge.labels(kind).set(n)
            if deps.forget is not None:
                oldest = await deps.forget.forgets.oldest_pending()
                age = 0.0 if oldest is None else max(0.0, time.time() - oldest)
                deps.forget.metrics.oldest_pending_seconds.set(age)
        except (RedisError, OSError, StoreUnavailable) as exc:
            log.debug("graph size not refreshed: %s", exc)  # the scrape still succeeds

    add_ops_routes(
        app,
        registry,
        deps.settings,
        dependencies={"redis": lambda: redis_health(deps)},
        before_scrape=refresh_gauges,
    )
    return app


def _json(body: bytes) -> Response:
    # The handler has laid out and serialised the response model's fields: a Response is
    # sent as it is, where a model would be validated and serialised again.
    return Response(body, media_type="application/json")


class CountRequests:
    """ASGI middleware: ``requests{endpoint, status}`` of the known endpoints.

    Plain ASGI rather than ``@app.middleware("http")``, whose wrapper runs each request's
    response through a stream between two tasks.
    """

    def __init__(self, app: ASGIApp, counter: Counter) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.app(scope, receive, note)
        endpoint = getattr(scope.get("route"), "path", "unmatched")
        if status and endpoint in ENDPOINTS:
            self.counter.labels(endpoint, str(status)).inc()
