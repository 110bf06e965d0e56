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
from services.runtime.records import BatchResult, Record, decoded, forgetting_not_wired


def _decode(record: Record) -> FactsExtracted | ForgetRequested:
    return decode_keyed(FactsExtracted, record.key, record.value)


async def handle(
    batch: list[Record],
    pipeline: ReflectionPipeline,
    forgetting: Forgetting | None = None,
    metrics: ForgetMetrics | None = None,
) -> BatchResult:
    result = BatchResult()
    for record, ev in decoded(batch, result, _decode):
        if isinstance(ev, ForgetRequested):
            if forgetting is None:
                result.failed.append(forgetting_not_wired(record))
                continue
            started = time.perf_counter()
            removed = await forgetting.at_last_stage(ev)
            if removed is not None and metrics is not None:
                metrics.cascade_seconds.observe(time.perf_counter() - started)
                for kind, n in removed.items():
                    metrics.removed.labels(kind).inc(n)
            continue
        written = await pipeline.on_facts(ev)
        result.stored["reflection"] += len(written)
    return result
