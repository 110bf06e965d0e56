"""Extract service wiring: the faust agent on ``gaama.episodes.v1`` and the idle-chunk timer."""

from __future__ import annotations

import logging
from functools import partial

import faust
from prometheus_client import CollectorRegistry

from gaama.config import Settings
from gaama.errors import GaamaError
from gaama.events import TOPIC_EPISODES
from gaama.extract.pipeline import ExtractionPipeline
from gaama.metrics import StageMetrics
from services.extract.handlers import facts_out, handle
from services.runtime.records import BatchResult
from services.runtime.worker import Publisher, ReadyCheck, add_ops_pages, consume, make_app

log = logging.getLogger("gaama.extract")


def build_app(
    settings: Settings,
    pipeline: ExtractionPipeline,
    registry: CollectorRegistry,
    metrics: StageMetrics,
    ready: ReadyCheck,
) -> faust.App:
    app = make_app("extract", settings, settings.extract_port)
    publisher = Publisher(app, settings, "extract")
    # Extraction is slow per chunk; small batches keep acks (and progress) flowing.
    consume(
        app,
        service="extract",
        source_base=TOPIC_EPISODES,
        settings=settings,
        handler=partial(handle, pipeline=pipeline),
        metrics=metrics,
        publisher=publisher,
        batch_size=16,
        window_s=0.2,
    )
    add_ops_pages(app, registry, ready, settings)

    @app.timer(interval=max(0.5, min(10.0, settings.chunk_idle_s / 2)))
    async def close_idle_chunks() -> None:
        try:
            done = await pipeline.close_idle()
        except GaamaError as exc:  # retried on the next tick; the chunk stays open in Redis
            log.warning("closing idle chunks failed (%s): %s", exc.reason, exc)
            metrics.retries.inc()
            return
        if done:
            await publisher.publish(BatchResult(out=facts_out(done)), TOPIC_EPISODES)
            for e in done:
                metrics.stored.labels("fact").inc(len(e.new_fact_ids))

    return app
