"""Reflect: facts → reflections.

Consumes ``gaama.facts.v1`` (key ``<tenant>/<conversation>``), writes Reflection nodes and
DERIVED_FROM_FACT edges to Redis, dead-letters to ``gaama.facts.v1.dlq``. Produces no topic.
It is the last stage, so forget requests end here: once every lane of a request has arrived,
the cascade runs (:mod:`gaama.forgetting`).
"""

from __future__ import annotations

import time

from gaama.events import FactsExtracted, ForgetRequested, decode_keyed
from gaama.extract.reflection import ReflectionPipeline
from gaama.forgetting import Forgetting
from gaama.metrics import ForgetMetrics
from services.runtime.lanes import handle_in_lanes
from services.runtime.records import BatchResult, Record


def _decode(record: Record) -> FactsExtracted | ForgetRequested:
    return decode_keyed(FactsExtracted, record.key, record.value)


async def handle(
    batch: list[Record],
    pipeline: ReflectionPipeline,
    forgetting: Forgetting | None = None,
    metrics: ForgetMetrics | None = None,
    concurrency: int = 1,
) -> BatchResult:
    """Chunks in arrival order within each conversation; the conversations of a batch run side
    by side, up to ``concurrency`` at once (their LLM calls overlap). A forget request waits for
    the chunks before it and holds back those after it."""

    def done(result: BatchResult, written: list[str]) -> None:
        result.stored["reflection"] += len(written)

    async def forget(forgetting: Forgetting, ev: ForgetRequested, _: BatchResult) -> None:
        started = time.perf_counter()
        removed = await forgetting.at_last_stage(ev)
        if removed is not None and metrics is not None:
            metrics.cascade_seconds.observe(time.perf_counter() - started)
            for kind, n in removed.items():
                metrics.removed.labels(kind).inc(n)

    return await handle_in_lanes(
        batch,
        _decode,
        pipeline.on_facts,
        concurrency,
        done=done,
        forgetting=forgetting,
        forget=forget,
    )
