"""Reflect: facts → reflections.

Consumes ``gaama.facts.v1`` (key ``<tenant>/<conversation>``), writes Reflection nodes and
DERIVED_FROM_FACT edges to Redis, dead-letters to ``gaama.facts.v1.dlq``. Produces no topic.
"""

from __future__ import annotations

from gaama.errors import ValidationError
from gaama.events import FactsExtracted, decode, split_key
from gaama.extract.reflection import ReflectionPipeline
from services.runtime.records import BatchResult, Failure, Record


async def handle(batch: list[Record], pipeline: ReflectionPipeline) -> BatchResult:
    result = BatchResult()
    for record in batch:
        try:
            ev = decode(FactsExtracted, record.value)
            if split_key(record.key) != (ev.tenant, ev.conversation):
                raise ValidationError(
                    "message key does not match the event's tenant/conversation",
                    reason="tenant_mismatch",
                )
        except ValidationError as exc:
            result.failed.append(Failure(record, exc.reason, str(exc)))
            continue
        written = await pipeline.on_facts(ev)
        result.stored["reflection"] += len(written)
    return result
