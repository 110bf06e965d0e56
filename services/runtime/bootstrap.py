"""Start-up shared by the services: Redis stores, the index check, and running a faust worker."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import faust
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter, Histogram

from gaama.config import Settings, load_settings
from gaama.embed import Embedder, build_embedder
from gaama.errors import ConfigError, GaamaError, StoreUnavailable
from gaama.forgetting import Forgetting
from gaama.metrics import (
    StageMetrics,
    embed_metrics,
    gc_pause_metric,
    loop_metrics,
    stage_metrics,
)
from gaama.store import connect
from gaama.store.chunks import ChunkStore
from gaama.store.durability import Durability
from gaama.store.forget import ForgetStore
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from services.runtime import logformat
from services.runtime import tracing as trace_context
from services.runtime.heap import settle_heap
from services.runtime.logs import limit_repeats
from services.runtime.loop_monitor import LoopMonitor
from services.runtime.readiness import IndexKeeper, redis_state
from services.runtime.shutdown import start_watchdog
from services.runtime.worker import StageApp

log = logging.getLogger("gaama.runtime")


@dataclass
class Stores:
    redis: aioredis.Redis
    graph: GraphStore
    index: VectorIndex

    async def state(self) -> str | None:
        """None when Redis answers and the vector index exists, else the reason (read-only:
        :class:`IndexKeeper` recreates a missing index)."""
        return await redis_state(self.redis, self.index)

    async def aclose(self) -> None:
        await self.redis.aclose()

    def forgetting(self, settings: Settings, dropped: Counter | None = None) -> Forgetting:
        """What a stage needs to play its part in forget requests (``dropped``: the counter of
        forget events without an accepted request)."""
        keys = self.graph.keys
        return Forgetting(
            ForgetStore(self.redis, keys),
            ChunkStore(self.redis, keys),
            lock_ttl_s=settings.chunk_lock_s or 15.0,
            dropped=dropped,
        )


async def ensure_index(settings: Settings, dim: int) -> None:
    """Create the vector index if needed (a short-lived client: the service's own client must
    only ever be used on the service's event loop)."""
    client = connect(
        settings.redis_url, cluster=settings.redis_cluster, auth=settings.redis, socket_timeout=10
    )
    keys = Keys(settings.key_prefix)
    try:
        await VectorIndex(client, settings.index_name, dim, keys).ensure()
        # Fail at start, naming the setting, when Redis cannot give the durability asked for.
        await Durability(
            client,
            keys.durability_marker,
            settings.durability,
            timeout_s=settings.durability_timeout_s,
        ).wait()
    finally:
        await client.aclose()


def connect_stores(settings: Settings, dim: int) -> Stores:
    """The stores, the index ensured first. Redis being down is no reason not to start: the
    service serves what does not need it, and :class:`IndexKeeper` creates the index once Redis
    answers; a bad setting or an index of another dimension still stops the start."""
    try:
        asyncio.run(ensure_index(settings, dim))
    except StoreUnavailable as exc:
        log.warning("Redis is down at start (%s); the index is ensured once it answers", exc)
    client = connect(
        settings.redis_url,
        cluster=settings.redis_cluster,
        auth=settings.redis,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
    )
    keys = Keys(settings.key_prefix)
    return Stores(
        client, GraphStore(client, keys), VectorIndex(client, settings.index_name, dim, keys)
    )


class GracefulWorker(faust.Worker):
    """faust's worker, with SIGTERM (and SIGINT) draining the stage's batch before faust stops
    the app (:mod:`services.runtime.shutdown`)."""

    def __init__(
        self, app: StageApp, settings: Settings | None = None, *, service: str = "", **kwargs: Any
    ) -> None:
        if settings is not None:
            kwargs.setdefault("loglevel", settings.log_level)
        super().__init__(app, **kwargs)
        self.drain = app.drain
        self.settings = settings
        self.service = service

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        # mode replaced the root logger's handlers: they take the service's format again.
        if self.settings is not None:
            if self.settings.log_format == "json":
                self.spinner = None  # a terminal spinner's output is not a log line
            logformat.apply(self.service, self.settings)

    async def on_execute(self) -> None:
        await super().on_execute()
        # faust has configured logging by now: hold back repeats of its own, mode's and the
        # Kafka client's warnings (an outage logs every reconnect attempt, a slow timer every
        # tick), as ingest's HTTP app does.
        limit_repeats()

    # mode calls this once per process on the first SIGTERM/SIGINT; faust's stop, which
    # cancels the agent, comes only after the batch in hand is done or its deadline passed.
    async def _stop_on_signal(self, signal: signal.Signals) -> None:
        start_watchdog(self.drain.grace_s)
        self.drain.begin()
        await self.drain.settle()
        await super()._stop_on_signal(signal)


def run_worker(
    app: StageApp,
    settings: Settings,
    warm: Callable[[], None] | None = None,
    gc_pauses: Histogram | None = None,
    service: str = "",
) -> int:
    if warm is not None:
        warm()  # load the model before taking traffic, not on the first batch
    settle_heap(settings, gc_pauses)
    try:
        GracefulWorker(app, settings, service=service).execute_from_commandline()
    except GaamaError as exc:
        log.error("stopped: %s", exc)
        return 2
    return 0


@dataclass(frozen=True)
class Service:
    """What every consumer stage starts with: its settings, metrics registry and stage metrics,
    the embedder, and the stores."""

    name: str
    settings: Settings
    registry: CollectorRegistry
    metrics: StageMetrics
    embedder: Embedder
    stores: Stores


def serve(
    name: str,
    wire: Callable[[Service], StageApp],
    tasks: Sequence[str] = ("consumer_lag", "progress"),
) -> int:
    """Start the stage ``name``: logging, settings (a bad one: the message and exit code 2),
    metrics, embedder and stores; ``wire`` builds the faust app from them, which then runs."""
    logging.basicConfig(level=logging.INFO, format=logformat.TEXT_FORMAT)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"{name}: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    trace_context.start(name, settings)
    registry = CollectorRegistry()
    metrics = stage_metrics(name, registry, tasks=tasks)
    embedder = build_embedder(settings, embed_metrics(name, registry))
    stores = connect_stores(settings, embedder.dim)
    app = wire(Service(name, settings, registry, metrics, embedder, stores))
    # How busy the worker's event loop is (started with the app's other tasks, stopped with it).
    app.task(LoopMonitor(loop_metrics(name, registry)).run)
    app.task(IndexKeeper(stores.index).run)  # the index back after Redis lost it
    return run_worker(
        app,
        settings,
        warm=getattr(embedder, "warm_up", None),
        gc_pauses=gc_pause_metric(name, registry),
        service=name,
    )
