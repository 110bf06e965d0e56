"""The ingest handler as the service runs it: the existence check and the
embedding in the handler, the episode appends left to the runtime in ``BatchResult.writes``, and
a turn whose append the store rejects dead-lettered on its own, its event withheld."""

from __future__ import annotations

import numpy as np
import pytest

from gaama.config import Settings
from gaama.embed import Embedder
from gaama.episodes import episode_node
from gaama.errors import PermanentError
from gaama.events import TOPIC_TURNS, conversation_key
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from services.ingest.handlers import IngestDeps, handle
from services.runtime.policy import process_batch
from tests.component.test_forget_cascade import C1, C2, turns
from tests.support.stream import record

pytestmark = pytest.mark.requires_stack


def records_of(*convs):
    return [
        record(TOPIC_TURNS, conversation_key(t.tenant, t.conversation), t)
        for conv in convs
        for t in conv
    ]


async def test_appends_wait_for_the_runtime_then_land_in_order(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: Embedder
) -> None:
    sent = turns("acme", "c1", C1)
    deps = IngestDeps(settings, graph, embedder)
    result = await handle(records_of(sent), deps)
    ids = [episode_node(t).id for t in sent]
    assert len(result.out) == len(sent) and result.writes
    assert await graph.existing("acme", ids) == set()  # nothing written yet
    await result.make_writes()
    assert result.stored["episode"] == len(sent) and not result.failed
    assert await graph.chain("acme", "c1") == ids
    again = await handle(records_of(sent), deps)  # a redelivery: embeds and appends nothing
    assert again.writes == [] and len(again.out) == len(sent)


async def test_a_rejected_append_dead_letters_its_turns_only(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: Embedder
) -> None:
    good, bad = turns("acme", "good", C1), turns("acme", "bad", C2)
    # A key of the wrong type where the bad conversation's chain goes: its appends fail with a
    # reply error (WRONGTYPE), not an outage.
    await graph.redis.set(graph.keys.chain("acme", "bad"), "not a sorted set")
    deps = IngestDeps(settings, graph, embedder)
    mixed = [t for pair in zip(good, bad, strict=False) for t in pair]
    mixed += good[len(bad) :] + bad[len(good) :] + bad[:1]  # one bad turn sent twice
    result = await handle(records_of(mixed), deps)
    await result.make_writes()
    bad_ids = {episode_node(t).id for t in bad}
    assert len(result.failed) == len(bad)  # each bad turn once
    assert all(f.reason == "error" and "WRONGTYPE" in f.error for f in result.failed)
    announced = {o.event.episode_id for o in result.out}  # type: ignore[attr-defined]
    assert announced.isdisjoint(bad_ids) and len(announced) == len(good)
    assert await graph.chain("acme", "good") == [episode_node(t).id for t in good]
    assert await graph.existing("acme", list(bad_ids)) == set()


class OneAtATime:
    """An embedder that fails any call of more than one text: the runtime's policy then handles
    the batch's records one by one and merges their results."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim

    async def embed(self, texts: list[str]) -> np.ndarray:
        if len(texts) > 1:
            raise PermanentError("one text at a time")
        return await self.inner.embed(texts)


async def test_records_handled_one_by_one_count_their_writes_in_the_batch_result(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: Embedder
) -> None:
    sent = turns("acme", "c1", C1)
    deps = IngestDeps(settings, graph, OneAtATime(embedder))  # type: ignore[arg-type]
    result = await process_batch(
        lambda batch: handle(batch, deps), records_of(sent), max_retries=0, backoff=0.0
    )
    assert len(result.writes) == len(sent) and not result.failed
    await result.make_writes()
    assert result.stored["episode"] == len(sent)  # counted where the runtime reads it
    assert await graph.chain("acme", "c1") == [episode_node(t).id for t in sent]
