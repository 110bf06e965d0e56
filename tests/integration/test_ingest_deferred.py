"""The ingest handler as the service runs it (``defer_writes``): the existence check and the
embedding in the handler, the episode appends left to the runtime in ``BatchResult.writes``, and
a turn whose append the store rejects dead-lettered on its own, its event withheld."""

from __future__ import annotations

from gaama.config import Settings
from gaama.embed import Embedder
from gaama.episodes import episode_node
from gaama.events import TOPIC_TURNS, conversation_key
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from services.ingest.handlers import IngestDeps, handle
from tests.component.test_forget_cascade import C1, C2, turns
from tests.support.stream import record


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
    deps = IngestDeps(settings, graph, embedder, defer_writes=True)
    result = await handle(records_of(sent), deps)
    ids = [episode_node(t).id for t in sent]
    assert len(result.out) == len(sent) and result.writes
    assert await graph.existing("acme", ids) == set()  # nothing written yet
    for write in result.writes:
        await write()
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
    deps = IngestDeps(settings, graph, embedder, defer_writes=True)
    mixed = [t for pair in zip(good, bad, strict=False) for t in pair]
    mixed += good[len(bad) :] + bad[len(good) :] + bad[:1]  # one bad turn sent twice
    result = await handle(records_of(mixed), deps)
    for write in result.writes:
        await write()
    bad_ids = {episode_node(t).id for t in bad}
    assert len(result.failed) == len(bad)  # each bad turn once
    assert all(f.reason == "error" and "WRONGTYPE" in f.error for f in result.failed)
    announced = {o.event.episode_id for o in result.out}  # type: ignore[attr-defined]
    assert announced.isdisjoint(bad_ids) and len(announced) == len(good)
    assert await graph.chain("acme", "good") == [episode_node(t).id for t in good]
    assert await graph.existing("acme", list(bad_ids)) == set()
