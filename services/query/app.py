"""HTTP routes of the query service (FastAPI); it consumes and produces no topics.

Endpoints: ``POST /v1/search``, ``POST /v1/answer``, ``GET /v1/nodes/{id}`` (API key required),
``GET /metrics``, ``/healthz``, ``/readyz``; OpenAPI at ``/openapi.json``. Errors answer
``{"error": "<message>"}`` (request validation adds ``"detail"``, the field-by-field list).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request, Response
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
from services.runtime.auth import Authenticator, AuthError, metrics_allowed

log = logging.getLogger("gaama.query")

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]
ENDPOINTS = ("/v1/search", "/v1/answer", "/v1/nodes/{node_id}")


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


async def current_tenant(request: Request) -> str:
    """The tenant of the request's API key (never of its body): 401, 403 or 429 otherwise."""
    auth: Authenticator = request.app.state.auth
    address = request.client.host if request.client else ""
    try:
        return auth.tenant(request.headers, address)
    except AuthError as exc:
        raise HTTPException(exc.status, exc.message, headers=exc.headers() or None) from None


# Module level: FastAPI resolves the (postponed) annotations in this module's namespace.
Tenant = Annotated[str, Depends(current_tenant)]


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
        return JSONResponse({"error": str(exc)}, status)

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
                if kind != "entity":
                    gauge.labels(kind).set(n)
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
