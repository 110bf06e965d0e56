"""Ingest service wiring: the faust agent on ``gaama.turns.v1`` and the HTTP app.

HTTP (FastAPI, served on the worker's loop): ``POST /v1/turns`` (API key required) publishes
turns onto ``gaama.turns.v1`` with the bounded :class:`~services.runtime.producer.EventProducer`
(acks=all) and answers 202 ``{"accepted", "episode_ids"}``; 400 for a body that is not JSON, 413
over a size limit (body bytes, turn text), 422 for any other bad field, 429 over the tenant's
rate, 403 for a token without ``write`` or naming another subject or conversation than its own
(a token's turns carry its subject), 503 with ``Retry-After`` when the broker does not take the
turns in time. Plus ``/metrics``, ``/healthz`` (``degraded`` naming Redis or the broker when
down) and ``/readyz`` (the pod alone).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry

from gaama.episodes import episode_node
from gaama.events import TOPIC_TURNS, conversation_key
from gaama.metrics import StageMetrics, http_error_metric, key_reload_metric
from services.ingest.handlers import (
    IngestDeps,
    bound_turns,
    handle,
    parse_json,
    parse_turns_request,
)
from services.runtime.admission import Admission, tenant_metrics
from services.runtime.auth import Authenticator
from services.runtime.http import (
    BodyLimit,
    ReadyCheck,
    Serving,
    add_ops_routes,
    authenticate,
    install_error_handlers,
)
from services.runtime.logs import limit_repeats
from services.runtime.producer import EventProducer, Publication
from services.runtime.progress import Progress
from services.runtime.stall import Stall
from services.runtime.tracing import TraceRequests, trace_request
from services.runtime.worker import StageApp, serve_http, stage_app, stage_serving

log = logging.getLogger("gaama.ingest")


def build_app(
    deps: IngestDeps,
    registry: CollectorRegistry,
    metrics: StageMetrics,
    redis: ReadyCheck,
    producer: EventProducer,
) -> StageApp:
    """The faust app: the turns consumer, and the HTTP app served on the worker's loop."""
    s = deps.settings
    app, _publisher, _lag = stage_app(
        "ingest",
        s,
        port=s.ingest_port,
        source_base=TOPIC_TURNS,
        handler=partial(handle, deps=deps),
        metrics=metrics,
        batch_size=s.ingest_batch,
        window_s=s.ingest_batch_window_s,
    )
    api = create_http_app(
        deps,
        registry,
        redis,
        producer,
        serving=stage_serving(app),
        stall=app.stall,
        progress=app.progress,
    )
    serve_http(app, api, s)
    return app


def create_http_app(
    deps: IngestDeps,
    registry: CollectorRegistry,
    redis: ReadyCheck,
    producer: EventProducer,
    *,
    serving: Serving | None = None,
    stall: Stall | None = None,
    progress: Progress | None = None,
) -> FastAPI:
    """The ingest HTTP app (tests serve it in-process with any producer). ``redis`` is the
    read-only Redis check and ``producer`` the broker's, both shown by ``/healthz``; ``serving``
    the pod's own readiness, ``stall`` the consumer's outage state and ``progress`` its
    no-progress watchdog."""
    s = deps.settings

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        limit_repeats()  # the worker has configured logging by now
        try:
            yield
        finally:
            await producer.aclose()

    api = FastAPI(
        title="GAAMA ingest",
        version="0.1.0",
        description="Accepts conversation turns for the memory pipeline.",
        lifespan=lifespan,
        openapi_url="/openapi.json" if s.http_docs else None,
        docs_url="/docs" if s.http_docs else None,
        redoc_url=None,
    )
    auth = Authenticator(s, key_reload_metric("ingest", registry))
    admission = Admission(
        0,
        s.ingest_tenant_rate,
        s.ingest_tenant_burst,
        tenant_metrics("ingest", registry),
        setting=("", "GAAMA_INGEST_TENANT_RATE"),
    )
    errors = http_error_metric("ingest", registry)
    install_error_handlers(api, s, errors, log)
    api.add_middleware(BodyLimit, limit=s.http_max_body_bytes)
    api.add_middleware(TraceRequests)

    add_ops_routes(
        api,
        registry,
        s,
        dependencies={"redis": redis, "broker": producer.ready},
        serving=serving,
        stall=stall,
        progress=progress,
    )

    @api.post("/v1/turns", status_code=202)
    async def post_turns(request: Request) -> JSONResponse:
        """Publish one turn, or ``{"turns": [...]}`` (at most 1000), for the key's tenant (a
        token's turns carry its subject)."""
        who = authenticate(request, auth)
        who.require("write")
        tenant = who.tenant
        turns = bound_turns(parse_turns_request(parse_json(await request.body()), tenant, s), who)
        trace_request(tenant, turns=len(turns))
        admission.take(tenant, len(turns))
        items: list[Publication] = [
            (TOPIC_TURNS, conversation_key(t.tenant, t.conversation), t, None) for t in turns
        ]
        await producer.send_many(items)
        ids = [episode_node(t).id for t in turns]
        return JSONResponse({"accepted": len(ids), "episode_ids": ids}, 202)

    return api
