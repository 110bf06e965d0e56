"""The one HTTP stack (FastAPI) every service shares: error → status mapping, request-validation
errors, the API-key dependency, the request-body limit and the ops routes.

- Errors answer ``{"error": "<message>"}``; request validation adds ``"detail"`` (the
  field-by-field list). :func:`status_of` maps the error tree: bad input 422 (413 when a limit
  was exceeded), not found 404, an outage (Redis, broker) 503 with ``Retry-After``, malformed
  LLM output 502, anything else 500.
- :class:`BodyLimit` refuses a request body over ``GAAMA_HTTP_MAX_BODY_BYTES`` with 413 before
  anything parses it: by its ``Content-Length`` at once, or while a chunked body streams in.
- :func:`add_ops_routes`: ``/metrics`` (behind ``GAAMA_METRICS_TOKEN`` when set), ``/healthz``
  (``ok``, or ``degraded`` naming the dependency that is down) and ``/readyz`` (the pod itself
  serves; a dependency outage never makes it unready).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gaama.config import Settings
from gaama.errors import GaamaError, LLMOutputError, NotFound, RetryableError, ValidationError
from services.runtime.auth import Authenticator, AuthError, Caller, metrics_allowed
from services.runtime.progress import Progress
from services.runtime.readiness import dependency_states
from services.runtime.stall import Stall

ReadyCheck = Callable[[], Awaitable[str | None]]  # None when up, else the reason
Serving = Callable[[], str | None]  # None while the pod serves, else why not


def status_of(exc: GaamaError) -> int:
    """The HTTP status of an error we raised on purpose."""
    explicit = getattr(exc, "http_status", None)
    if isinstance(explicit, int):
        return explicit
    if isinstance(exc, ValidationError):
        return 413 if exc.reason == "too_large" else 422
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, RetryableError):
        return 503
    if isinstance(exc, LLMOutputError):
        return 502
    return 500


def error_response(exc: GaamaError, settings: Settings) -> JSONResponse:
    status = status_of(exc)
    headers = None
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int):
        headers = {"Retry-After": str(retry_after)}
    elif isinstance(exc, RetryableError):
        headers = {"Retry-After": str(settings.http_retry_after_s)}
    return JSONResponse({"error": str(exc)}, status, headers=headers)


def validation_message(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    """One line naming each bad field, and the field-by-field list."""
    errors: list[dict[str, Any]] = [
        {
            "loc": [str(p) for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in exc.errors()
    ]
    message = "; ".join(f"{'.'.join(e['loc'][1:]) or 'body'}: {e['msg']}" for e in errors)
    return message, errors


def install_error_handlers(
    app: FastAPI, settings: Settings, errors: Counter, log: logging.Logger
) -> None:
    """Map HTTPException, request validation and :class:`GaamaError` to ``{"error"}`` answers,
    counting each in ``errors{reason}``."""

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        errors.labels("unauthorized" if exc.status_code in (401, 403, 429) else "http").inc()
        return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, detail = validation_message(exc)
        errors.labels("invalid").inc()
        return JSONResponse({"error": message, "detail": detail}, 422)

    @app.exception_handler(GaamaError)
    async def gaama_error(_: Request, exc: GaamaError) -> JSONResponse:
        response = error_response(exc, settings)
        errors.labels(exc.reason).inc()
        # An outage is logged where it is detected (rate-limited); a 5xx here is a bug or a
        # misconfiguration worth a line per request.
        explicit = getattr(exc, "http_status", None) is not None  # e.g. a feature not wired
        if response.status_code >= 500 and not isinstance(exc, RetryableError) and not explicit:
            log.warning("request failed (%s): %s", exc.reason, exc)
        return response


# --- auth -----------------------------------------------------------------------------------


def client_address(request: Request, auth: Authenticator) -> str:
    """The request's client: its socket peer, or the forwarded client behind a trusted proxy."""
    return auth.address(request.client.host if request.client else "", request.headers)


def authenticate(request: Request, auth: Authenticator) -> Caller:
    """Who the request's API key or token acts for; HTTPException 401/403/429 otherwise."""
    try:
        return auth.principal(request.headers, client_address(request, auth))
    except AuthError as exc:
        raise HTTPException(exc.status, exc.message, headers=exc.headers() or None) from None


# --- the request-body limit -----------------------------------------------------------------


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes, before the app reads it.

    A declared ``Content-Length`` over the limit is refused at once; a chunked body is counted as
    it arrives and refused as soon as it passes the limit.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    def _refuse(self) -> JSONResponse:
        return JSONResponse(
            {"error": f"request body larger than {self.limit} bytes (GAAMA_HTTP_MAX_BODY_BYTES)"},
            413,
            headers={"Connection": "close"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.limit:
                    await self._refuse()(scope, receive, send)
                    return
        seen = 0
        refused = started = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # Answer now; the app sees the client gone and whatever it sends is dropped.
                    refused = True
                    if not started:
                        await self._refuse()(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if not refused:
                started = True
                await send(message)

        await self.app(scope, limited_receive, guarded_send)


# --- ops routes -----------------------------------------------------------------------------


def metrics_refused(request: Request, settings: Settings) -> Response | None:
    """None when the request may read /metrics (``metrics_allowed``); else the 401 answer."""
    if metrics_allowed(request.headers, settings):
        return None
    return JSONResponse(
        {"error": "/metrics needs 'Authorization: Bearer <GAAMA_METRICS_TOKEN>'"},
        401,
        headers={"WWW-Authenticate": "Bearer"},
    )


def add_ops_routes(
    app: FastAPI,
    registry: CollectorRegistry,
    settings: Settings,
    *,
    dependencies: Mapping[str, ReadyCheck] | None = None,
    serving: Serving | None = None,
    before_scrape: Callable[[], Awaitable[None]] | None = None,
    stall: Stall | None = None,
    progress: Progress | None = None,
) -> None:
    """``/metrics``, ``/healthz`` and ``/readyz`` (not in the OpenAPI document).

    ``/readyz`` is about the pod alone: 200 while it serves, 503 once it shuts down
    (``serving``) or its no-progress watchdog tripped; a dependency being down never makes it
    unready (the requests that need the dependency answer 503 with ``Retry-After`` instead).
    ``/healthz`` (the liveness probe) is 200 with ``"status": "ok"``, or ``"degraded"`` naming
    each dependency that is down and the stage's stall; 503 only when the watchdog tripped.
    Neither writes anything.

    Args:
        dependencies: Each dependency's read-only check (None when up, else the reason).
        serving: None while the pod serves, else why not (shutting down).
        before_scrape: Refreshes gauges before a scrape; it must not raise.
        stall: A consumer stage's outage state: while it retries one, ``/healthz`` shows it
            under ``"stalled"`` (still 200: a restart would not help).
        progress: A consumer stage's no-progress watchdog: once it trips, ``/healthz`` and
            ``/readyz`` answer 503 (``"status": "no_progress"``): only a restart helps.
    """
    checks = dict(dependencies or {})

    @app.get("/metrics", include_in_schema=False)
    async def prometheus(request: Request) -> Response:
        if (refused := metrics_refused(request, settings)) is not None:
            return refused
        if before_scrape is not None:
            await before_scrape()
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    def wedged() -> dict[str, str] | None:
        return progress.wedged() if progress is not None else None

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        if (state := wedged()) is not None:
            return JSONResponse(state, 503)
        return JSONResponse(await health_body(checks, stall), 200)

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        if (state := wedged()) is not None:
            return JSONResponse(state, 503)
        if serving is not None and (reason := serving()) is not None:
            return JSONResponse({"status": "not ready", "reason": reason}, 503)
        return JSONResponse({"status": "ready"}, 200)


async def health_body(
    checks: Mapping[str, ReadyCheck], stall: Stall | None = None
) -> dict[str, Any]:
    """``{"status": "ok" | "degraded", "dependencies": {name: "ok" | reason}}``, with
    ``"stalled"`` (reason, since when) while a consumer stage retries an outage."""
    states = await dependency_states(checks)
    stalled = stall.current() if stall is not None else None
    down = stalled is not None or any(v != "ok" for v in states.values())
    body: dict[str, Any] = {"status": "degraded" if down else "ok", "dependencies": states}
    if stalled is not None:
        body["stalled"] = {k: v for k, v in stalled.as_json().items() if k != "status"}
    return body


def ops_app(
    service: str,
    registry: CollectorRegistry,
    settings: Settings,
    *,
    dependencies: Mapping[str, ReadyCheck] | None = None,
    serving: Serving | None = None,
    stall: Stall | None = None,
    progress: Progress | None = None,
) -> FastAPI:
    """The HTTP app of a consumer without endpoints of its own: the ops routes only."""
    app = FastAPI(title=f"GAAMA {service}", openapi_url=None, docs_url=None, redoc_url=None)
    add_ops_routes(
        app,
        registry,
        settings,
        dependencies=dependencies,
        serving=serving,
        stall=stall,
        progress=progress,
    )
    return app
