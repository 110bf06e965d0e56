"""Redis outages against the real Redis: every store call raises StoreUnavailable (never a raw
redis-py error), the runtime retries it without dead-lettering, and the idle-chunk timer's tick
survives it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from gaama.config import Settings
from gaama.devstack import free_port
from gaama.errors import StoreUnavailable
from gaama.events import FactsExtracted
from gaama.extract.offline import OfflineExtractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.metrics import stage_metrics
from gaama.model import Node, NodeKind
from gaama.store import connect
from gaama.store.chunks import ChunkStore
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from services.extract.app import idle_chunks_task
from services.runtime.policy import process_batch
from services.runtime.records import BatchResult, Record
from tests.component.test_extraction_pipeline import DIALOGUE, store_turns
from tests.support.redis_state import on_every_primary

pytestmark = pytest.mark.requires_stack


@asynccontextmanager
async def redis_paused(
    url: str, ms: int, mode: str = "ALL", *, cluster: bool = False
) -> AsyncIterator[None]:
    """Redis (every primary of a cluster) holds every command (``ALL``) or every write
    (``WRITE``) for ``ms`` or until the block ends. An ``ALL`` pause holds ``CLIENT UNPAUSE``
    too, so it is waited out."""
    admin = connect(url, cluster=cluster)
    await on_every_primary(admin, "CLIENT", "PAUSE", ms, mode)
    end = time.monotonic() + ms / 1000
    try:
        yield
    finally:
        if mode == "ALL":
            await asyncio.sleep(max(0.0, end - time.monotonic()))
        await on_every_primary(admin, "CLIENT", "UNPAUSE")
        await admin.aclose()


@pytest.fixture
async def dead_client() -> AsyncIterator[aioredis.Redis]:
    """A client of a port nothing listens on: every call fails to connect."""
    client = connect(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    yield client
    await client.aclose()


@pytest.fixture
async def impatient_client(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """A client of the real Redis that gives up on a reply after 0.3 s."""
    client = connect(
        settings.redis_url,
        cluster=settings.redis_cluster,
        socket_timeout=0.3,
        socket_connect_timeout=0.5,
    )
    yield client
    await client.aclose()


def _episode(tenant: str) -> Node:
    return Node(
        id="ep_outage", tenant=tenant, kind=NodeKind.EPISODE, text="x", time=1.0, conversation="c"
    )


async def _not_store_unavailable(
    calls: dict[str, Callable[[], Awaitable[object]]],
) -> dict[str, str]:
    """Each call that did not raise StoreUnavailable, with what it did instead."""
    wrong = {}
    for name, call in calls.items():
        try:
            await call()
        except StoreUnavailable:
            continue
        except Exception as exc:
            wrong[name] = repr(exc)
        else:
            wrong[name] = "no error"
    return wrong


async def _every_chunk_call(chunks: ChunkStore) -> None:
    held = chunks.redis.lock("k", timeout=5, thread_local=False)
    held.local.token = b"token"  # as if taken before the outage
    calls = {
        "append": lambda: chunks.append("t", "c", "ep_1", 3, 1.0),
        "size": lambda: chunks.size("t", "c"),
        "episodes": lambda: chunks.episodes("t", "c"),
        "forget_if_empty": lambda: chunks.forget_if_empty("t", "c"),
        "idle": lambda: chunks.idle(time.time()),
        "lock": lambda: chunks.lock("t", "c", 5),
        "extend": lambda: chunks.extend(held, 5),
        "unlock": lambda: chunks.unlock("t", "c", held),
    }
    assert await _not_store_unavailable(calls) == {}, "ChunkStore calls outside the error boundary"


async def _every_graph_call(graph: GraphStore) -> None:
    calls = {
        "append_episode": lambda: graph.append_episode(_episode("t")),
        "write": lambda: graph.write("t", [_episode("t")]),
        "exists": lambda: graph.exists("t", "ep_1"),
        "existing": lambda: graph.existing("t", ["ep_1"]),
        "chain": lambda: graph.chain("t", "c"),
        "get_state": lambda: graph.get_state("t", "s"),
        "get_nodes": lambda: graph.get_nodes("t", ["ep_1"]),
        "get_fields": lambda: graph.get_fields("t", ["ep_1"], ["text"]),
        "neighbours": lambda: graph.neighbours("t", ["ep_1"]),
        "vectors": lambda: graph.vectors("t", ["ep_1"], 4),
        "provenance": lambda: graph.provenance("t", ["ep_1"]),
        "delete_tenant": lambda: graph.delete_tenant("t"),
    }
    assert await _not_store_unavailable(calls) == {}, "GraphStore calls outside the error boundary"


async def test_store_calls_raise_store_unavailable_when_redis_is_unreachable(
    dead_client: aioredis.Redis, keys: Keys
):
    await _every_chunk_call(ChunkStore(dead_client, keys))
    await _every_graph_call(GraphStore(dead_client, keys))


async def test_store_calls_raise_store_unavailable_when_redis_is_paused(
    impatient_client: aioredis.Redis, keys: Keys, settings: Settings
):
    chunks, graph = ChunkStore(impatient_client, keys), GraphStore(impatient_client, keys)
    async with redis_paused(settings.redis_url, 2500, cluster=settings.redis_cluster):
        with pytest.raises(StoreUnavailable, match="Timeout"):
            await chunks.size("t", "c")
        with pytest.raises(StoreUnavailable, match="Timeout"):
            await graph.get_state("t", "s")
    assert await chunks.size("t", "c") == (0, 0)  # the same client works again afterwards


async def test_policy_retries_a_redis_outage_past_max_retries_and_dead_letters_nothing(
    impatient_client: aioredis.Redis, keys: Keys, settings: Settings
):
    chunks = ChunkStore(impatient_client, keys)
    calls = retries = 0

    async def handler(batch: list[Record]) -> BatchResult:
        nonlocal calls
        calls += 1
        result = BatchResult()
        for r in batch:
            await chunks.append("t", "c", r.value.decode(), 1, 1.0)
            result.stored["episode"] += 1
        return result

    def on_retry() -> None:
        nonlocal retries
        retries += 1

    batch = [
        Record(topic="t", key=b"t/c", value=f"ep_{i}".encode(), partition=0, offset=i)
        for i in range(3)
    ]
    async with redis_paused(settings.redis_url, 3000, "WRITE", cluster=settings.redis_cluster):
        task = asyncio.create_task(
            process_batch(handler, batch, max_retries=1, backoff=0.05, on_retry=on_retry)
        )
        await asyncio.sleep(1.5)  # several attempts fail on the paused writes meanwhile
        assert not task.done()
    result = await asyncio.wait_for(task, 30)
    assert not result.failed, [(f.reason, f.error) for f in result.failed]
    assert result.stored["episode"] == 3
    assert retries >= 2 and calls == retries + 1  # more than max_retries: never given up on
    assert await chunks.episodes("t", "c") == ["ep_0", "ep_1", "ep_2"]


async def test_idle_chunk_timer_survives_a_redis_pause(
    settings: Settings, keys: Keys, embedder, impatient_client: aioredis.Redis, index
):
    graph = GraphStore(impatient_client, keys)
    vectors = VectorIndex(impatient_client, settings.index_name, settings.embed_dim, keys)
    chunks = ChunkStore(impatient_client, keys)
    pipeline = ExtractionPipeline(
        ExtractDeps(settings, graph, vectors, chunks, embedder, OfflineExtractor())
    )
    start = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
    for ev in await store_turns(graph, embedder, "t", "c", DIALOGUE[:3], start, eos_last=False):
        assert await pipeline.on_episode(ev) == []  # the chunk stays open: short, no session end
    metrics = stage_metrics("extract", CollectorRegistry(), tasks=("idle_chunks",))
    published: list[FactsExtracted] = []

    async def publish(result: BatchResult, source: str) -> None:
        published.extend(o.event for o in result.out)  # type: ignore[misc]

    tick = idle_chunks_task(pipeline, publish, metrics, caught_up=lambda: True)
    assert await tick() is True  # the input is quiet from here on; the chunk is not idle yet
    assert published == []
    await asyncio.sleep(settings.chunk_idle_s + 0.1)  # the chunk is idle now
    # A cluster client also reads the slot map again (timing out as well) before it gives up.
    pause_ms = 6000 if settings.redis_cluster else 2000
    async with redis_paused(settings.redis_url, pause_ms, cluster=settings.redis_cluster):
        with pytest.raises(StoreUnavailable):  # the tick's path raises the retryable error...
            await pipeline.close_idle()
        assert await tick() is False  # ...which the tick counts and survives
    failures = metrics.task_failures.labels("idle_chunks", "store_unavailable")
    assert failures._value.get() >= 1
    assert published == []
    assert await tick() is True  # the next tick closes the chunk that stayed open
    assert len(published) == 1 and published[0].conversation == "c" and published[0].fact_ids
    assert await chunks.episodes("t", "c") == []  # closed: every episode extracted
