"""faust wiring shared by the consumer services: the app, the batch agent, and its HTTP server.

HTTP is FastAPI everywhere (:mod:`services.runtime.http`): a consumer's FastAPI app is served by
uvicorn on the faust worker's own event loop (``faust.contrib.asgi.serve_asgi``), in place of
faust's aiohttp web server. One loop matters: the consumer, the producers and the handlers'
Redis client must only be used from the loop they were made on; and faust's worker keeps the
process's signals, so SIGTERM stops the consumer and the HTTP server in one orderly shutdown.

The handlers never see faust: they take :class:`Record` batches and return events to publish.
The agent here waits for the batch's writes to be fsynced, publishes the events, then
acknowledges the batch, so offsets are committed only after Redis holds the writes on disk and
the broker holds the events (at-least-once); that finishing step runs while the next batches
are handled (:mod:`services.runtime.acks`).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import faust
from fastapi import FastAPI
from faust.contrib.asgi import serve_asgi
from prometheus_client import CollectorRegistry

from gaama.config import Settings
from gaama.errors import GaamaError, StoreUnavailable
from gaama.events import DeadLetter, dlq, encode, topic_name
from gaama.metrics import StageMetrics
from gaama.store import connect
from gaama.store.durability import Durability
from gaama.store.keys import Keys
from services.runtime.acks import acknowledge, run_batches
from services.runtime.background import Periodic
from services.runtime.http import ReadyCheck, Serving, ops_app
from services.runtime.kafka import Transport, faust_credentials
from services.runtime.lag import LagMonitor
from services.runtime.policy import Handler, backoff_delay, process_batch
from services.runtime.progress import Progress
from services.runtime.records import BatchResult, Failure, Record
from services.runtime.salvage import undecodable
from services.runtime.shutdown import Drain
from services.runtime.stall import Stall
from services.runtime.tracing import consumed, publishing, trace_headers

log = logging.getLogger("gaama.runtime")

__all__ = [
    "ReadyCheck",
    "StageApp",
    "add_ops_pages",
    "consume",
    "make_app",
    "serve_http",
    "stage_app",
    "stage_serving",
]

#: Largest request head (line + headers) buffered before a request is refused: big enough that an
#: oversized API key reaches the app and gets a clear 401 instead of a parser error.
MAX_REQUEST_HEAD_BYTES = 2 * 1024 * 1024


class StageApp(faust.App):
    """A stage's faust app, with the :class:`Drain` its agent and its worker share, the
    :class:`Stall` its retries report to and its health pages read, and the :class:`Progress`
    watchdog those pages read too."""

    drain: Drain
    stall: Stall
    progress: Progress | None = None

    def _new_transport(self) -> Any:
        return Transport(self.conf.broker_consumer, self)


def make_app(service: str, settings: Settings, port: int) -> StageApp:
    app_id = f"{settings.topic_prefix}gaama-{service}"
    # faust makes a data directory even without Tables; by default it is "<app id>-data" in the
    # working directory, one per app id: kept out of the checkout, under the temp directory.
    datadir = Path(tempfile.gettempdir()) / "gaama-faust" / app_id
    datadir.mkdir(parents=True, exist_ok=True)
    app = StageApp(
        app_id,
        broker=f"kafka://{settings.kafka_bootstrap_servers}",
        broker_credentials=faust_credentials(settings.kafka),
        key_serializer="raw",
        value_serializer="raw",
        web_host=settings.http_host,
        web_port=port,
        web_bind=settings.http_host,
        producer_acks=-1,  # acks=all: an event is accepted only once the broker has it
        topic_partitions=settings.topic_partitions,
        topic_allow_declare=False,  # topics are created by `gaama dev up` / the deploy job
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=1.0,
        broker_session_timeout=settings.consumer_session_timeout_s,
        broker_heartbeat_interval=max(1.0, settings.consumer_session_timeout_s / 3),
        broker_rebalance_timeout=max(10.0, settings.consumer_session_timeout_s * 2),
        # faust refuses a session timeout longer than the request timeout (90 s by default).
        broker_request_timeout=max(90.0, settings.consumer_session_timeout_s),
        store="memory://",  # no Tables: pipeline state lives in Redis (ARCHITECTURE.md §3)
        datadir=str(datadir),
        web_enabled=True,
    )
    app.drain = Drain(settings.shutdown_grace_s)
    app.stall = Stall()
    return app


class Publisher:
    """Sends handler output to the broker and waits until it is accepted."""

    def __init__(self, app: faust.App, settings: Settings, service: str) -> None:
        self.app = app
        self.settings = settings
        self.service = service
        self._topics: dict[str, Any] = {}

    def topic(self, base: str) -> Any:
        if base not in self._topics:
            self._topics[base] = self.app.topic(
                topic_name(base, self.settings.topic_prefix),
                key_type=bytes,
                value_type=bytes,
                value_serializer="raw",
                key_serializer="raw",
            )
        return self._topics[base]

    async def publish(self, result: BatchResult, source_base: str) -> None:
        futures = []
        for o in result.out:
            with publishing(o.topic, o.headers) as headers:
                futures.append(
                    await self.topic(o.topic).send(
                        key=o.key,
                        value=encode(o.event),
                        partition=o.partition,
                        headers=list(headers) or None,
                    )
                )
        for f in result.failed:
            letter = DeadLetter.of(
                source_topic=f.record.topic,
                value=f.record.value,
                key=f.record.key,
                partition=f.record.partition,
                offset=f.record.offset,
                reason=f.reason,
                error=f.error,
                service=self.service,
            )
            log.warning(
                "dead-lettered %s[%s]@%s: %s: %s",
                f.record.topic,
                f.record.partition,
                f.record.offset,
                f.reason,
                f.error,
                extra={
                    "topic": f.record.topic,
                    "partition": f.record.partition,
                    "offset": f.record.offset,
                },
            )
            futures.append(
                await self.topic(dlq(source_base)).send(
                    key=f.record.key or b"",
                    value=encode(letter),
                    headers=list(f.record.headers) or None,
                )
            )
        if futures:
            await self.app.producer.flush()
            for fut in futures:
                await fut  # raises if the broker refused the record: the batch is not acked


def consume(
    app: StageApp,
    *,
    service: str,
    source_base: str,
    settings: Settings,
    handler: Handler,
    metrics: StageMetrics,
    publisher: Publisher,
    batch_size: int,
    window_s: float,
) -> LagMonitor:
    """Bind ``handler`` to ``source_base`` as a batching faust agent, with timers keeping the
    consumer lag gauge and the no-progress watchdog up to date."""
    source = publisher.topic(source_base)
    durable = _durability(settings)
    lag = LagMonitor(
        app, topic_name(source_base, settings.topic_prefix), settings.topic_partitions, metrics.lag
    )

    drain, stall = app.drain, app.stall
    stall.gauge = metrics.stalled_since

    def outage(exc: GaamaError) -> None:
        stall.failed("batch", exc.reason, exc)

    async def agent(stream: Any) -> None:
        await run_batches(
            stream.take_events(batch_size, within=window_s),
            drain,
            handle,
            wait,
            finish,
            lambda events: acknowledge(app.consumer, events),
            settings.batches_behind,
            write,
        )

    async def handle(events: list[Any]) -> tuple[BatchResult, float]:
        records: list[Record] = []
        salvaged: list[Failure] = []
        for e in events:
            lag.saw(e.message.partition, e.message.offset)
            mark = undecodable(e.message.headers)
            if mark is not None:
                salvaged.append(_undecodable_failure(e.message, mark))
                continue
            msg = e.message
            trace, headers = consumed(
                msg.topic, msg.partition, msg.offset, trace_headers(msg.headers), service
            )
            records.append(
                Record(
                    topic=msg.topic,
                    key=e.key,
                    value=e.value,
                    partition=msg.partition,
                    offset=msg.offset,
                    headers=headers,
                    trace=trace,
                )
            )
        t0 = time.perf_counter()
        metrics.consumed.inc(len(events))
        if records:
            result = await process_batch(
                handler,
                records,
                max_retries=settings.max_retries,
                backoff=settings.retry_backoff_s,
                on_retry=metrics.retries.inc,
                on_outage=outage,
            )
        else:
            result = BatchResult()
        result.failed += salvaged
        return result, t0

    async def write(events: list[Any], handled: tuple[BatchResult, float]) -> None:
        # The writes the handler deferred, in order, after the previous batch's; an outage is
        # retried like the fsync wait's (each write is idempotent).
        result = handled[0]
        for deferred in result.writes:
            await _retry_outages(
                partial(deferred, result), settings, metrics, outage, "deferred write"
            )

    async def wait(events: list[Any], handled: tuple[BatchResult, float]) -> None:
        # Durable before acknowledged: the batch's writes are fsynced before its events go
        # out and its offsets can be committed. An outage or a slow fsync is retried without
        # limit, like any outage (the batch is not acknowledged meanwhile).
        await _retry_outages(durable.wait, settings, metrics, outage, "durability not confirmed")

    async def finish(events: list[Any], handled: tuple[BatchResult, float]) -> None:
        # After this batch's fsync wait and the previous batch's acknowledgement; run_batches
        # acknowledges the batch after this returns.
        result, t0 = handled
        await publisher.publish(result, source_base)
        stall.ok("batch")
        for kind, n in result.stored.items():
            metrics.stored.labels(kind).inc(n)
        for f in result.failed:
            metrics.dead_lettered.labels(f.reason).inc()
        metrics.batch_seconds.observe(time.perf_counter() - t0)

    agent.__name__ = f"{service}_agent"
    app.agent(source, name=f"{service}.agent")(agent)

    async def refresh() -> None:
        await lag.refresh()

    tick = Periodic("consumer_lag", refresh, metrics.task_failures, stall=stall)

    async def consumer_lag() -> None:
        await tick()

    app.timer(interval=settings.lag_interval_s, name=f"{service}.consumer_lag")(consumer_lag)

    # From local state only (no request), so a broker slow to answer ListOffsets does not delay
    # it; its own timer, so a slow lag refresh does not either.
    progress = app.progress = Progress(settings.progress_timeout_s, stall, metrics.no_progress)
    progress.watch(tick)

    async def observe() -> None:
        progress.observe(lag.backlog())

    watch = Periodic("progress", observe, metrics.task_failures)

    async def no_progress() -> None:
        await watch()

    interval = min(settings.lag_interval_s, 5.0)
    app.timer(interval=interval, name=f"{service}.progress")(no_progress)
    return lag


def _undecodable_failure(message: Any, mark: Any) -> Failure:
    """The dead letter of a record batch the consumer could not decode: its raw bytes, the
    first offset it covers (the error names the range) and the reason."""
    record = Record(
        topic=message.topic,
        key=None,
        value=bytes(message.value or b""),
        partition=message.partition,
        offset=mark.first_offset,
    )
    error = (
        f"record batch at offsets {mark.first_offset}..{mark.last_offset} cannot be decoded: "
        f"{mark.reason}"
    )
    return Failure(record, "undecodable", error)


def stage_app(
    service: str,
    settings: Settings,
    *,
    port: int,
    source_base: str,
    handler: Handler,
    metrics: StageMetrics,
    batch_size: int,
    window_s: float = 0.2,
) -> tuple[StageApp, Publisher, LagMonitor]:
    """A stage's faust app (``make_app``) consuming ``source_base`` with ``handler``
    (``consume``), the publisher its handler output and timers go through, and its lag monitor
    (which also says whether the stage has caught up with its input)."""
    app = make_app(service, settings, port)
    publisher = Publisher(app, settings, service)
    lag = consume(
        app,
        service=service,
        source_base=source_base,
        settings=settings,
        handler=handler,
        metrics=metrics,
        publisher=publisher,
        batch_size=batch_size,
        window_s=window_s,
    )
    return app, publisher, lag


def _durability(settings: Settings) -> Durability:
    # A connection of its own: WAITAOF blocks it, and the marker must precede it on one link.
    client = connect(
        settings.redis_url,
        cluster=settings.redis_cluster,
        auth=settings.redis,
        socket_timeout=settings.durability_timeout_s + 5,
    )
    return Durability(
        client,
        Keys(settings.key_prefix).durability_marker,
        settings.durability,
        replicas=settings.durability_replicas,
        timeout_s=settings.durability_timeout_s,
    )


async def _retry_outages(
    step: Callable[[], Awaitable[None]],
    settings: Settings,
    metrics: StageMetrics,
    outage: Callable[[GaamaError], None],
    what: str,
) -> None:
    """Run ``step`` until it succeeds, retrying a Redis outage without limit with backoff."""
    attempt = 0
    while True:
        try:
            await step()
            return
        except StoreUnavailable as exc:
            attempt += 1
            metrics.retries.inc()
            outage(exc)
            delay = backoff_delay(attempt, settings.retry_backoff_s)
            log.warning("%s (%s); retrying in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)


def serve_http(app: faust.App, api: FastAPI, settings: Settings) -> None:
    """Serve ``api`` on the worker's port (``make_app``'s), on the worker's event loop."""
    serve_asgi(
        app,
        api,
        host=settings.http_host,
        port=int(app.conf.web_port),
        access_log=False,  # a line per request: /metrics counts them instead
        h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES,
    )


def stage_serving(app: StageApp) -> Serving:
    """The stage's own readiness: it serves until shutdown has begun."""

    def serving() -> str | None:
        return "shutting down" if app.drain.stopping else None

    return serving


def add_ops_pages(
    app: StageApp, registry: CollectorRegistry, redis: ReadyCheck, settings: Settings
) -> None:
    """Serve only ``/metrics``, ``/healthz`` and ``/readyz`` (a consumer without endpoints);
    ``redis`` is the read-only check of the stage's one dependency shown by ``/healthz``."""
    api = ops_app(
        app.conf.id,
        registry,
        settings,
        dependencies={"redis": redis},
        serving=stage_serving(app),
        stall=app.stall,
        progress=app.progress,
    )
    serve_http(app, api, settings)
