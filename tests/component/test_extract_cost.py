"""What one chunk costs (issue 19): round trips and embeddings only for what is new, against
the real Redis and the real embedder."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from gaama.extract.offline import OfflineExtractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.model import NodeKind
from gaama.store.chunks import ChunkStore
from tests.component.test_extraction_pipeline import DIALOGUE, store_turns

pytestmark = pytest.mark.requires_stack

START = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


class CountingEmbedder:
    """The real embedder, keeping the texts it was asked to embed."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.texts: list[str] = []

    async def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return await self.inner.embed(texts)


async def test_a_chunk_embeds_only_texts_its_tenant_lacks(settings, graph, index, embedder):
    counting = CountingEmbedder(embedder)
    chunks = ChunkStore(graph.redis, graph.keys)
    pipe = ExtractionPipeline(
        ExtractDeps(settings, graph, index, chunks, counting, OfflineExtractor())
    )
    first = []
    for ev in await store_turns(graph, embedder, "acme", "c1", DIALOGUE, START):
        first += await pipe.on_episode(ev)
    [done] = first
    assert done.new_fact_ids and counting.texts
    facts = await graph.get_nodes("acme", done.fact_ids)
    assert {n.text for n in facts.values()} <= set(counting.texts)

    # The same turns at the same times in another conversation state the same facts and
    # concepts: every one is stored already, so nothing is embedded, and the facts gain the
    # new episodes as sources.
    counting.texts.clear()
    again = []
    c2 = await store_turns(graph, embedder, "acme", "c2", DIALOGUE, START)
    for ev in c2:
        again += await pipe.on_episode(ev)
    [second] = again
    assert second.fact_ids == done.fact_ids and not second.new_fact_ids
    assert counting.texts == []
    c1_eps = {s for f in facts.values() for s in f.extra["sources"].split(",")}
    c2_eps = {ev.episode_id for ev in c2}
    merged = await graph.get_fields("acme", second.fact_ids, ["sources"])
    for fid in second.fact_ids:
        cited = set(merged[fid][0].decode().split(","))
        assert cited & c1_eps and cited & c2_eps and cited <= c1_eps | c2_eps
    concepts = [
        n
        for n in (await graph.get_nodes("acme", second.concept_ids)).values()
        if n.kind is NodeKind.CONCEPT
    ]
    assert len(concepts) == len(second.concept_ids)


async def test_append_refuses_a_turn_that_would_overflow(settings, graph):
    chunks = ChunkStore(graph.redis, graph.keys)
    first = await chunks.append("acme", "c1", "ep_1", 8, 1.0, limit=10)
    assert (first.added, first.episodes, first.words) == (True, 1, 8)
    full = await chunks.append("acme", "c1", "ep_2", 3, 2.0, limit=10)
    assert full.overflow and not full.added and full.words == 8
    assert await chunks.episodes("acme", "c1") == ["ep_1"]
    # a redelivered episode is recognised before the limit is checked
    again = await chunks.append("acme", "c1", "ep_1", 8, 3.0, limit=10)
    assert not again.added and not again.overflow and again.episodes == 1
    # an empty chunk takes a turn longer than the limit (a turn is never split)
    long = await chunks.append("acme", "c2", "ep_3", 50, 4.0, limit=10)
    assert long.added and long.words == 50
    # without a limit nothing is refused
    assert (await chunks.append("acme", "c1", "ep_2", 3, 5.0)).added


async def test_the_idle_hint_is_set_when_a_chunk_opens_and_on_redelivery(settings, graph):
    chunks = ChunkStore(graph.redis, graph.keys)
    hints = f"{graph.keys.prefix}:open-chunk-tenants"
    await chunks.append("acme", "c1", "ep_1", 3, 1.0)
    assert await graph.redis.smembers(hints) == {b"acme"}
    await graph.redis.srem(hints, "acme")  # as if Redis lost it (or idle() pruned it)
    await chunks.append("acme", "c1", "ep_2", 3, 2.0)  # one round trip: no hint
    assert await graph.redis.smembers(hints) == set()
    await chunks.append("acme", "c1", "ep_2", 3, 2.0)  # redelivered: the hint again
    assert await chunks.idle(older_than=10.0) == [("acme", "c1")]
