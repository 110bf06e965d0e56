"""Reflect: facts → reflections.

Consumes ``gaama.facts.v1`` (key ``<tenant>/<conversation>``), writes Reflection nodes and
DERIVED_FROM_FACT edges to Redis, dead-letters to ``gaama.facts.v1.dlq``. Produces no topic.
It is the last stage, so forget requests end here: once every lane of a request has arrived,
the cascade runs (:mod:`gaama.forgetting`).
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from gaama.events import FactsExtracted, ForgetRequested, decode_keyed
from gaama.extract.reflection import ReflectionPipeline
from gaama.forgetting import Forgetting
from gaama.metrics import ForgetMetrics
from services.runtime.lanes import run_lanes
from services.runtime.records import BatchResult, Record, decoded, forgetting_not_wired


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
    result = BatchResult()
    lanes: dict[Hashable, list[FactsExtracted]] = {}

    async def run() -> None:
        for written in await run_lanes(lanes, pipeline.on_facts, concurrency):
            result.stored["reflection"] += sum(len(w) for w in written)
        lanes.clear()

    for record, ev in decoded(batch, result, _decode):
        if isinstance(ev, ForgetRequested):
            await run()
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
        lanes.setdefault((ev.tenant, ev.conversation), []).append(ev)
    await run()
    return result
