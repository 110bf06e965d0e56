"""The idle-chunk timer closes a chunk only when its conversation was silent while the worker
kept up with its input: not because the worker was restarting, stalled on Redis, or behind.

Before, the timer compared the chunk's last append with the wall clock alone: after a 20 s
Redis stop (or an extract restart with a backlog) every open chunk looked idle, closed early,
and the next turns of each conversation started a new chunk — other boundaries, so other facts,
than in a run without the outage (make chaos, scenario redis-stop).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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


@dataclass
class OpenChunk:
    """A conversation whose chunk is open (short, no session end), a clock the test moves, and
    the idle timer's tick on both."""

    chunks: ChunkStore
    pipeline: ExtractionPipeline
    now: list[float]
    published: list[FactsExtracted] = field(default_factory=list)
    caught_up: bool = True

    def tick(self) -> Callable[[], Awaitable[bool]]:
        async def publish(result: BatchResult, source: str) -> None:
            self.published.extend(o.event for o in result.out)  # type: ignore[misc]

        metrics = stage_metrics("extract", CollectorRegistry(), tasks=("idle_chunks",))
        return idle_chunks_task(
            self.pipeline, publish, metrics, lambda: self.caught_up, clock=lambda: self.now[0]
        )

    def wait(self, seconds: float) -> None:
        self.now[0] += seconds


@pytest.fixture
async def open_chunk(settings, graph, index, embedder, redis_client, keys) -> OpenChunk:
    now = [1_000_000.0]
    chunks = ChunkStore(redis_client, keys)
    deps = ExtractDeps(settings, graph, index, chunks, embedder, OfflineExtractor())
    deps.clock = lambda: now[0]
    pipeline = ExtractionPipeline(deps)
    start = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
    for ev in await store_turns(graph, embedder, "t", "c", DIALOGUE[:3], start, eos_last=False):
        assert await pipeline.on_episode(ev) == []
    return OpenChunk(chunks, pipeline, now)


async def test_idle_clock_runs_only_while_the_worker_is_caught_up(
    settings, open_chunk: OpenChunk
) -> None:
    idle = settings.chunk_idle_s
    tick = open_chunk.tick()
    open_chunk.caught_up = False  # an outage, a restart, a backlog
    open_chunk.wait(idle * 20)  # silent by the wall clock
    assert await tick() is True
    assert open_chunk.published == [] and len(await open_chunk.chunks.episodes("t", "c")) == 3

    open_chunk.caught_up = True  # from here the conversation has to stay silent
    assert await tick() is True
    assert open_chunk.published == [], "closed as soon as the worker caught up"
    open_chunk.wait(idle / 2)
    assert await tick() is True
    assert open_chunk.published == [], "closed before a silent period of chunk_idle_s"

    open_chunk.wait(idle / 2)
    assert await tick() is True
    assert [e.conversation for e in open_chunk.published] == ["c"]
    assert await open_chunk.chunks.episodes("t", "c") == []


async def test_falling_behind_restarts_the_idle_clock(settings, open_chunk: OpenChunk) -> None:
    idle = settings.chunk_idle_s
    tick = open_chunk.tick()
    assert await tick() is True  # caught up: the quiet period starts
    open_chunk.wait(idle * 0.6)
    open_chunk.caught_up = False  # a backlog (or an outage) in between
    assert await tick() is True
    open_chunk.caught_up = True
    assert await tick() is True  # quiet again, from now
    open_chunk.wait(idle * 0.6)
    assert await tick() is True
    assert open_chunk.published == [], "the quiet time before the backlog was counted"
    open_chunk.wait(idle * 0.6)
    assert await tick() is True
    assert len(open_chunk.published) == 1
