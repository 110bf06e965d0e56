"""Extract service wiring: the faust agent on ``gaama.episodes.v1`` and the idle-chunk timer."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial

from gaama.events import TOPIC_EPISODES, FactsExtracted, decode
from gaama.extract.pipeline import ExtractionPipeline
from gaama.metrics import StageMetrics, forget_dropped_metric
from gaama.store.outbox import Outbox
from services.extract.handlers import facts_out, handle
from services.runtime.background import Periodic
from services.runtime.bootstrap import Service
from services.runtime.records import BatchResult
from services.runtime.stall import Stall
from services.runtime.worker import StageApp, add_ops_pages, stage_app

log = logging.getLogger("gaama.extract")

Publish = Callable[[BatchResult, str], Awaitable[None]]


def idle_chunks_task(
    pipeline: ExtractionPipeline,
    publish: Publish,
    metrics: StageMetrics,
    caught_up: Callable[[], bool],
    stall: Stall | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Periodic:
    """The idle-chunk timer's tick: close chunks idle for ``chunk_idle_s`` and publish their
    facts. A failed tick (Redis or the broker away) leaves the chunk open in Redis and is retried
    on the next one; it never stops the worker.

    The idle clock runs only while the consumer is ``caught_up`` with its input (nothing read
    and uncommitted, nothing known left to read): a conversation is not silent because this
    worker was restarting, waiting for Redis, or still working through a backlog."""
    quiet_since: float | None = None

    async def close_idle() -> None:
        nonlocal quiet_since
        now = clock()
        if not caught_up():
            quiet_since = None
            return
        quiet_since = now if quiet_since is None else quiet_since
        done = await pipeline.close_idle(input_quiet_s=now - quiet_since)
        if done:
            await publish(BatchResult(out=facts_out(done)), TOPIC_EPISODES)
            for e in done:
                metrics.stored.labels("fact").inc(len(e.new_fact_ids))

    return Periodic("idle_chunks", close_idle, metrics.task_failures, stall=stall)


def outbox_task(
    outbox: Outbox,
    resend_s: float,
    publish: Publish,
    metrics: StageMetrics,
    stall: Stall | None = None,
) -> Periodic:
    """The outbox timer's tick: send again the facts events reflect has not handled within
    ``resend_s`` (a worker killed between a chunk's write and its publication)."""

    async def resend() -> None:
        now = time.time()
        for tenant, chunk_id, payload in await outbox.stale(now - resend_s):
            event = decode(FactsExtracted, payload)
            await publish(BatchResult(out=facts_out([event])), TOPIC_EPISODES)
            await outbox.touch(tenant, chunk_id, now)
            log.info(
                "sent the facts of chunk %s again (not reflected in %.0fs)", chunk_id, resend_s
            )

    return Periodic("outbox", resend, metrics.task_failures, stall=stall)


def build_app(svc: Service, pipeline: ExtractionPipeline, outbox: Outbox | None = None) -> StageApp:
    settings, metrics = svc.settings, svc.metrics
    app, publisher, lag = stage_app(
        "extract",
        settings,
        port=settings.extract_port,
        source_base=TOPIC_EPISODES,
        handler=partial(
            handle,
            pipeline=pipeline,
            forgetting=svc.stores.forgetting(
                settings, forget_dropped_metric(svc.name, svc.registry)
            ),
            concurrency=settings.llm_concurrency,
        ),
        metrics=metrics,
        batch_size=settings.extract_batch,
    )
    add_ops_pages(app, svc.registry, svc.stores.state, settings)

    idle = idle_chunks_task(pipeline, publisher.publish, metrics, lag.caught_up, app.stall)
    progress = app.progress
    assert progress is not None  # stage_app made it
    progress.watch(idle)

    @app.timer(interval=max(0.5, min(10.0, settings.chunk_idle_s / 2)))
    async def close_idle_chunks() -> None:
        await idle()

    if outbox is not None:
        resend = outbox_task(
            outbox, settings.outbox_resend_s, publisher.publish, metrics, app.stall
        )
        progress.watch(resend)

        @app.timer(interval=max(1.0, settings.outbox_resend_s / 4))
        async def resend_outbox() -> None:
            await resend()

    return app
