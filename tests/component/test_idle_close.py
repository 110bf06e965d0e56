"""The idle-chunk timer closes a chunk only when its conversation was silent while the worker
kept up with its input: not because the worker was restarting, stalled on Redis, or behind.

Before, the timer compared the chunk's last append with the wall clock alone: after a 20 s
Redis stop (or an extract restart with a backlog) every open chunk looked idle, closed early,
and the next turns of each conversation started a new chunk — other boundaries, so other facts,
than in a run without the outage (make chaos, scenario redis-stop).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from gaama.events import FactsExtracted
from gaama.extract.offline import OfflineExtractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.metrics import stage_metrics
from gaama.store.chunks import ChunkStore
from services.extract.app import idle_chunks_task
from services.runtime.records import BatchResult
from tests.component.test_extraction_pipeline import DIALOGUE, store_turns

pytestmark = pytest.mark.requires_stack


async def test_idle_clock_runs_only_while_the_worker_is_caught_up(
    settings, graph, index, embedder, redis_client, keys
) -> None:
    chunks = ChunkStore(redis_client, keys)
    pipeline = ExtractionPipeline(
        ExtractDeps(settings, graph, index, chunks, embedder, OfflineExtractor())
    )
    start = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
    for ev in await store_turns(graph, embedder, "t", "c", DIALOGUE[:3], start, eos_last=False):
        assert await pipeline.on_episode(ev) == []  # open: short, no session end
    metrics = stage_metrics("extract", CollectorRegistry(), tasks=("idle_chunks",))
    published: list[FactsExtracted] = []

    async def publish(result: BatchResult, source: str) -> None:
        published.extend(o.event for o in result.out)  # type: ignore[misc]

    behind = True
    tick = idle_chunks_task(pipeline, publish, metrics, caught_up=lambda: not behind)
    await asyncio.sleep(settings.chunk_idle_s + 0.1)  # silent by the wall clock
    assert await tick() is True
    assert published == [] and len(await chunks.episodes("t", "c")) == 3  # behind: kept open

    behind = False  # caught up now: the conversation has to stay silent from here
    assert await tick() is True
    assert published == [], "closed as soon as the worker caught up, before a silent period"

    await asyncio.sleep(settings.chunk_idle_s + 0.1)
    assert await tick() is True
    assert len(published) == 1 and published[0].conversation == "c"
    assert await chunks.episodes("t", "c") == []


async def test_falling_behind_restarts_the_idle_clock(
    settings, graph, index, embedder, redis_client, keys
) -> None:
    chunks = ChunkStore(redis_client, keys)
    pipeline = ExtractionPipeline(
        ExtractDeps(settings, graph, index, chunks, embedder, OfflineExtractor())
    )
    start = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
    for ev in await store_turns(graph, embedder, "t", "c", DIALOGUE[:2], start, eos_last=False):
        await pipeline.on_episode(ev)
    metrics = stage_metrics("extract", CollectorRegistry(), tasks=("idle_chunks",))
    published: list[FactsExtracted] = []

    async def publish(result: BatchResult, source: str) -> None:
        published.extend(o.event for o in result.out)  # type: ignore[misc]

    state = {"caught_up": True}
    tick = idle_chunks_task(pipeline, publish, metrics, caught_up=lambda: state["caught_up"])
    assert await tick() is True  # the quiet period starts
    await asyncio.sleep(settings.chunk_idle_s / 2)
    state["caught_up"] = False  # a backlog (or an outage) in between
    assert await tick() is True
    state["caught_up"] = True
    assert await tick() is True  # quiet again, from now
    await asyncio.sleep(settings.chunk_idle_s / 2 + 0.1)
    assert await tick() is True
    assert published == [], "the quiet time before the backlog was counted"
    await asyncio.sleep(settings.chunk_idle_s / 2 + 0.1)
    assert await tick() is True
    assert len(published) == 1
