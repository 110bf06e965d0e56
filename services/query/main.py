"""Start the query service: ``python -m services.query.main``.

Builds settings, the Redis client and stores, the embedder and the metrics registry, then serves
the FastAPI app with uvicorn on ``GAAMA_HTTP_HOST:GAAMA_QUERY_PORT``. Stateless: run as many
replicas as the load needs.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from uvicorn.config import LOGGING_CONFIG

from gaama import coalesce
from gaama.config import Settings, load_settings
from gaama.embed import build_embedder
from gaama.errors import GaamaError
from gaama.metrics import (
    embed_metrics,
    forget_metrics,
    gc_pause_metric,
    llm_metrics,
    loop_metrics,
    query_metrics,
)
from gaama.retrieval.search import Retriever
from gaama.store.forget import ForgetStore
from services.query.app import create_app
from services.query.handlers import Answerer, QueryDeps
from services.query.memories import ForgetDeps
from services.runtime import logformat
from services.runtime import tracing as trace_context
from services.runtime.bootstrap import connect_stores
from services.runtime.heap import settle_heap
from services.runtime.loop_monitor import LoopMonitor
from services.runtime.producer import EventProducer
from services.runtime.readiness import IndexKeeper
from services.runtime.shutdown import stop_reserve

log = logging.getLogger("gaama.query")


def answerer_factory(
    settings: Settings, registry: CollectorRegistry, owned: list[Any]
) -> Callable[[], Answerer]:
    """Builds the LLM answerer on the first ``/v1/answer`` call.

    The LLM stack is imported only then: a deployment without an LLM never loads it.
    """

    def build() -> Answerer:
        from gaama.llm.client import LLMClient
        from gaama.llm.extractor import LLMExtractor

        client = LLMClient(settings, metrics=llm_metrics("query", registry))
        owned.append(client)  # closed at shutdown
        return LLMExtractor(client)

    return build


def query_embedder_settings(settings: Settings) -> Settings:
    """The settings the query service builds its embedder with: ``GAAMA_QUERY_ONNX_THREADS``
    intra-op threads in place of the pipeline stages' ``GAAMA_ONNX_THREADS``."""
    return settings.model_copy(update={"onnx_threads": settings.query_onnx_threads})


def build(settings: Settings) -> FastAPI:
    """The app with its clients; they are closed when the app shuts down."""
    registry = CollectorRegistry()
    metrics = query_metrics(registry)
    gc_pauses = gc_pause_metric("query", registry)
    loop = LoopMonitor(loop_metrics("query", registry))
    # Concurrent requests' query encodes share one batch (GAAMA_EMBED_COALESCE_MS; 0 = off).
    embedder = coalesce.for_queries(
        build_embedder(query_embedder_settings(settings), embed_metrics("query", registry)),
        settings,
    )
    stores = connect_stores(settings, embedder.dim)  # creates the index if missing and Redis is up
    owned: list[Any] = []
    forgets = ForgetStore(stores.redis, stores.graph.keys)
    producer = EventProducer(settings)  # started on the first forget request
    owned.append(producer)
    fm = forget_metrics("query", registry)
    fm.pending_limit_seconds.set(settings.forget_pending_alert_s)
    deps = QueryDeps(
        settings=settings,
        graph=stores.graph,
        index=stores.index,
        retriever=Retriever(stores.graph, stores.index, embedder, settings, metrics=metrics),
        metrics=metrics,
        answerer_factory=answerer_factory(settings, registry, owned),
        forgets=forgets,
        forget=ForgetDeps(forgets, producer, fm),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        warm = getattr(embedder, "warm_up", None)
        if warm is not None:
            await asyncio.to_thread(warm)  # load the model before taking traffic
        settle_heap(settings, gc_pauses)
        monitor = loop.start()
        keeper = asyncio.create_task(IndexKeeper(stores.index).run())  # the index after a loss
        log.info("query service ready: embedder=%s llm=%s", embedder.name, settings.llm_enabled)
        try:
            yield
        finally:
            monitor.cancel()
            keeper.cancel()
            for client in owned:
                await client.aclose()
            await stores.aclose()

    return create_app(deps, registry, lifespan=lifespan)


#: Largest request head (line + headers) buffered before a request is refused. Big enough that an
#: oversized API key reaches the app and gets a clear 401 instead of a parser error; small enough
#: to bound what one connection can make the server hold.
MAX_REQUEST_HEAD_BYTES = 2 * 1024 * 1024


def server_config(
    app: FastAPI,
    host: str,
    port: int,
    grace_s: float = 30.0,
    log_config: dict[str, Any] | None = LOGGING_CONFIG,
) -> uvicorn.Config:
    """The uvicorn configuration the service runs with (tests start the same).

    On SIGTERM uvicorn stops accepting connections and lets the requests in flight finish;
    those still running when the grace (``GAAMA_SHUTDOWN_GRACE_S``) less the stop reserve is up
    are cancelled, so the process is gone before Kubernetes kills it.
    """
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        log_config=log_config,
        h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES,
        timeout_graceful_shutdown=max(1, round(grace_s - stop_reserve(grace_s))),
    )


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    # Before uvicorn serves (start-up) and after it has shut down: uvicorn hands the signal it
    # handled back to the previous handler, which would otherwise end the process *by* SIGTERM.
    raise SystemExit(0)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format=logformat.TEXT_FORMAT)
    signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        settings = load_settings()
        trace_context.start("query", settings)
        app = build(settings)
    except GaamaError as exc:  # bad config, Redis down, index of another dimension
        print(f"query: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    config = server_config(
        app,
        settings.http_host,
        settings.query_port,
        settings.shutdown_grace_s,
        log_config=logformat.uvicorn_log_config(settings),
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
