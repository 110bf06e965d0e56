"""Extract: episodes → facts and concepts.

Consumes ``gaama.episodes.v1`` (key ``<tenant>/<conversation>``), produces ``gaama.facts.v1``
(same key), dead-letters to ``gaama.episodes.v1.dlq``. Chunking state lives in Redis; see
:mod:`gaama.extract.pipeline`.
"""

from __future__ import annotations

from gaama.events import (
    TOPIC_FACTS,
    EpisodeStored,
    FactsExtracted,
    ForgetRequested,
    conversation_key,
    decode_keyed,
)
from gaama.extract.pipeline import ExtractionPipeline
from gaama.forgetting import Forgetting
from services.runtime.records import (
    BatchResult,
    Outgoing,
    Record,
    decoded,
    forgetting_not_wired,
)


def facts_out(events: list[FactsExtracted]) -> list[Outgoing]:
    return [Outgoing(TOPIC_FACTS, conversation_key(e.tenant, e.conversation), e) for e in events]


def validate_episode(record: Record) -> EpisodeStored | ForgetRequested:
    return decode_keyed(EpisodeStored, record.key, record.value)


async def handle(
    batch: list[Record], pipeline: ExtractionPipeline, forgetting: Forgetting | None = None
) -> BatchResult:
    """Episodes in arrival order (turn order per conversation); a forget request takes its
    episodes out of open chunks and travels on to reflect."""
    result = BatchResult()
    for record, ev in decoded(batch, result, validate_episode):
        if isinstance(ev, ForgetRequested):
            if forgetting is None:
                result.failed.append(forgetting_not_wired(record))
                continue
            await forgetting.at_extract(ev)
            result.out.append(Outgoing(TOPIC_FACTS, ev.key(), ev, ev.partition))
            continue
        done = await pipeline.on_episode(ev)
        result.out += facts_out(done)
        for e in done:
            result.stored["fact"] += len(e.new_fact_ids)
    return result
