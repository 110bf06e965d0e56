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
from services.runtime.worker import ReadyCheck, add_ops_pages, stage_app


def build_app(
    settings: Settings,
    pipeline: ReflectionPipeline,
    registry: CollectorRegistry,
    metrics: StageMetrics,
    ready: ReadyCheck,
    forgetting: Forgetting | None = None,
    forget_metrics: ForgetMetrics | None = None,
) -> faust.App:
    app, _publisher = stage_app(
        "reflect",
        settings,
        port=settings.reflect_port,
        source_base=TOPIC_FACTS,
        handler=partial(handle, pipeline=pipeline, forgetting=forgetting, metrics=forget_metrics),
        metrics=metrics,
        batch_size=settings.reflect_batch,
    )
    add_ops_pages(app, registry, ready, settings)
    return app
