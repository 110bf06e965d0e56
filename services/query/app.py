"""HTTP routes of the query service (FastAPI); it consumes and produces no topics.

Endpoints: ``POST /v1/search``, ``POST /v1/answer``, ``GET /v1/nodes/{id}`` (API key required),
``GET /metrics``, ``/healthz``, ``/readyz``; OpenAPI at ``/openapi.json``. Errors answer
``{"error": "<message>"}`` (request validation adds ``"detail"``, the field-by-field list).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from redis.exceptions import RedisError

from gaama.errors import (
    GaamaError,
    LLMOutputError,
    NotFound,
    RetryableError,
    StoreUnavailable,
    ValidationError,
)
from gaama.metrics import graph_size_gauge
from services.query.auth import Tenant
from services.query.handlers import (
    AnswerRequest,
    AnswerResponse,
    NodeResponse,
    QueryDeps,
    SearchRequest,
    SearchResponse,
    Unavailable,
    handle_answer,
    handle_node,
    handle_search,
    readiness,
)
from services.query.routes import register_memory_routes
from services.runtime.auth import Authenticator, metrics_allowed

log = logging.getLogger("gaama.query")

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]
ENDPOINTS = (
    "/v1/search",
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


def _status(exc: GaamaError) -> int:
    if isinstance(exc, ValidationError):
        return 422
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Unavailable | RetryableError):
        return 503
    if isinstance(exc, LLMOutputError):
        return 502
    return 500


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
    app.state.auth = Authenticator(deps.settings)
    metrics = deps.metrics
    gauge = graph_size_gauge("query", registry)
    for endpoint in ENDPOINTS:
        metrics.requests.labels(endpoint, "200")

    @app.middleware("http")
    async def count_requests(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        route = request.scope.get("route")
        endpoint = getattr(route, "path", "unmatched")
        if endpoint in ENDPOINTS:
            metrics.requests.labels(endpoint, str(response.status_code)).inc()
        return response

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        metrics.errors.labels(
            "unauthorized" if exc.status_code in (401, 403, 429) else "http"
        ).inc()
        return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        message = "; ".join(f"{'.'.join(e['loc'][1:]) or 'body'}: {e['msg']}" for e in errors)
        metrics.errors.labels("invalid").inc()
        return JSONResponse({"error": message, "detail": errors}, 422)

    @app.exception_handler(GaamaError)
    async def gaama_error(_: Request, exc: GaamaError) -> JSONResponse:
        status = _status(exc)
        metrics.errors.labels(exc.reason).inc()
        if status >= 500 and not isinstance(exc, Unavailable):  # misconfig: not per request
            log.warning("query failed (%s): %s", exc.reason, exc)
        headers = {"Retry-After": "5"} if isinstance(exc, RetryableError) else None
        return JSONResponse({"error": str(exc)}, status, headers=headers)

    @app.post("/v1/search", response_model=SearchResponse)
    async def search(body: SearchRequest, tenant: Tenant) -> SearchResponse:
        """Packed memory and the top-k ranking for a query, from the caller's tenant."""
        return await handle_search(body, tenant, deps)

    @app.post("/v1/answer", response_model=AnswerResponse)
    async def answer(body: AnswerRequest, tenant: Tenant) -> AnswerResponse:
        """An LLM answer from the packed memory (503 when no LLM is configured)."""
        return await handle_answer(body, tenant, deps)

    @app.get("/v1/nodes/{node_id}", response_model=NodeResponse)
    async def node(node_id: str, tenant: Tenant) -> NodeResponse:
        """One node of the caller's tenant with its neighbours; 404 for any other id."""
        return await handle_node(node_id, tenant, deps)

    register_memory_routes(app, deps)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus(request: Request) -> Response:
        if not metrics_allowed(request.headers, deps.settings):
            return JSONResponse(
                {"error": "/metrics needs 'Authorization: Bearer <GAAMA_METRICS_TOKEN>'"},
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            for kind, n in (await deps.index.count()).items():
                gauge.labels(kind).set(n)
            if deps.forget is not None:
                oldest = await deps.forget.forgets.oldest_pending()
                age = 0.0 if oldest is None else max(0.0, time.time() - oldest)
                deps.forget.metrics.oldest_pending_seconds.set(age)
        except (RedisError, OSError, StoreUnavailable) as exc:
            log.debug("graph size not refreshed: %s", exc)  # the scrape still succeeds
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        reason = await readiness(deps)
        if reason is not None:
            return JSONResponse({"status": "not ready", "reason": reason}, 503)
        return JSONResponse({"status": "ready"}, 200)

    return app
