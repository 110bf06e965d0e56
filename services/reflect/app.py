"""Reflect service wiring: the faust agent on ``gaama.facts.v1``."""

from __future__ import annotations

from functools import partial

import faust
from prometheus_client import CollectorRegistry

from gaama.config import Settings
from gaama.events import TOPIC_FACTS
from gaama.extract.reflection import ReflectionPipeline
from gaama.forgetting import Forgetting
from gaama.metrics import ForgetMetrics, StageMetrics
from services.reflect.handlers import handle
from services.runtime.worker import Publisher, ReadyCheck, add_ops_pages, consume, make_app


def build_app(
    settings: Settings,
    pipeline: ReflectionPipeline,
    registry: CollectorRegistry,
    metrics: StageMetrics,
    ready: ReadyCheck,
    forgetting: Forgetting | None = None,
    forget_metrics: ForgetMetrics | None = None,
) -> faust.App:
    app = make_app("reflect", settings, settings.reflect_port)
    publisher = Publisher(app, settings, "reflect")
    consume(
        app,
        service="reflect",
        source_base=TOPIC_FACTS,
        settings=settings,
        handler=partial(handle, pipeline=pipeline, forgetting=forgetting, metrics=forget_metrics),
        metrics=metrics,
        publisher=publisher,
        batch_size=settings.reflect_batch,
        window_s=0.2,
    )
    add_ops_pages(app, registry, ready, settings)
    return app
