"""Reflect service wiring: the faust agent on ``gaama.facts.v1``."""

from __future__ import annotations

from functools import partial

from gaama.events import TOPIC_FACTS
from gaama.extract.reflection import ReflectionPipeline
from gaama.metrics import forget_dropped_metric, forget_metrics
from services.reflect.handlers import handle
from services.runtime.bootstrap import Service
from services.runtime.worker import StageApp, add_ops_pages, stage_app


def build_app(svc: Service, pipeline: ReflectionPipeline) -> StageApp:
    settings = svc.settings
    handler = partial(
        handle,
        pipeline=pipeline,
        forgetting=svc.stores.forgetting(settings, forget_dropped_metric(svc.name, svc.registry)),
        metrics=forget_metrics("reflect", svc.registry),
        concurrency=settings.llm_concurrency,
    )
    app, _publisher, _lag = stage_app(
        "reflect",
        settings,
        port=settings.reflect_port,
        source_base=TOPIC_FACTS,
        handler=handler,
        metrics=svc.metrics,
        batch_size=settings.reflect_batch,
    )
    add_ops_pages(app, svc.registry, svc.stores.state, settings)
    return app
