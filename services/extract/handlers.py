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
from services.runtime.lanes import handle_in_lanes
from services.runtime.records import BatchResult, Outgoing, Record


def facts_out(events: list[FactsExtracted]) -> list[Outgoing]:
    return [Outgoing(TOPIC_FACTS, conversation_key(e.tenant, e.conversation), e) for e in events]


def validate_episode(record: Record) -> EpisodeStored | ForgetRequested:
    return decode_keyed(EpisodeStored, record.key, record.value)


async def handle(
    batch: list[Record],
    pipeline: ExtractionPipeline,
    forgetting: Forgetting | None = None,
    concurrency: int = 1,
) -> BatchResult:
    """Episodes in arrival order within each conversation; the conversations of a batch run
    side by side, up to ``concurrency`` at once, so that one chunk's LLM call does not hold up
    the others. A forget request waits for the episodes before it, and holds back those after
    it, then travels on to reflect (it takes its episodes out of open chunks)."""
    return await handle_in_lanes(
        batch,
        validate_episode,
        pipeline.on_episode,
        concurrency,
        done=_facts_done,
        forgetting=forgetting,
        forget=_forget,
    )


def _facts_done(result: BatchResult, events: list[FactsExtracted]) -> None:
    result.out += facts_out(events)
    for e in events:
        result.stored["fact"] += len(e.new_fact_ids)


async def _forget(forgetting: Forgetting, ev: ForgetRequested, result: BatchResult) -> None:
    await forgetting.at_extract(ev)
    result.out.append(Outgoing(TOPIC_FACTS, ev.key(), ev, ev.partition))
