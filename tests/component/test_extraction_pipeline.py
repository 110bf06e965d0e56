"""Extraction and reflection pipelines in-process against the real Redis (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gaama.config import Settings
from gaama.episodes import episode_node, episode_stored
from gaama.events import EpisodeStored, TurnReceived
from gaama.extract.offline import OfflineExtractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.extract.reflection import ReflectDeps, ReflectionPipeline
from gaama.model import EdgeKind, NodeKind
from gaama.store.chunks import ChunkStore
from gaama.store.graph import GraphStore
from tests.support.redis_state import namespace_size

pytestmark = pytest.mark.requires_stack

DIALOGUE = [
    ("Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "That's great! I painted a lake sunrise last year, painting relaxes me."),
    (
        "Caroline",
        "I'm thinking about adopting a child. The adoption agency interviews are next month.",
    ),
    ("Melanie", "My kids love camping. We went camping at the beach last week."),
    ("Caroline", "The support group helped me a lot with my transition."),
    ("Melanie", "Painting and pottery are my favourite hobbies; I did a pottery class."),
]


async def store_turns(
    graph: GraphStore,
    embedder,
    tenant: str,
    conv: str,
    turns: list[tuple[str, str]],
    start: datetime,
    eos_last: bool = True,
) -> list[EpisodeStored]:
    out = []
    for i, (speaker, text) in enumerate(turns):
        t = TurnReceived(
            tenant=tenant,
            conversation=conv,
            turn_id=f"D1:{i + 1}",
            speaker=speaker,
            text=text,
            timestamp=start + timedelta(minutes=i),
            end_of_session=eos_last and i == len(turns) - 1,
        )
        [v] = await embedder.embed([t.episode_text()])
        node = episode_node(t, v.tolist())
        await graph.append_episode(node)
        out.append(episode_stored(t, node))
    return out


def pipelines(settings: Settings, graph: GraphStore, index, embedder):
    ex = OfflineExtractor()
    chunks = ChunkStore(graph.redis, graph.keys)
    return (
        ExtractionPipeline(ExtractDeps(settings, graph, index, chunks, embedder, ex)),
        ReflectionPipeline(ReflectDeps(settings, graph, index, embedder, ex)),
        chunks,
    )


async def test_end_of_session_closes_chunk_and_writes_all_edge_kinds(
    settings, graph, index, embedder
):
    extract, reflect, chunks = pipelines(settings, graph, index, embedder)
    events = await store_turns(
        graph, embedder, "acme", "c1", DIALOGUE, datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    )
    produced = []
    for ev in events:
        produced += await extract.on_episode(ev)
    assert len(produced) == 1
    fx = produced[0]
    assert fx.new_fact_ids and fx.concept_ids
    assert await chunks.episodes("acme", "c1") == []
    facts = await graph.get_nodes("acme", fx.fact_ids)
    texts = " | ".join(f.text for f in facts.values())
    assert "7 May 2023" in texts  # "yesterday" said on 8 May 2023
    # provenance: every fact derives from episodes of this chunk
    ep_ids = {e.episode_id for e in events}
    adj = await graph.neighbours("acme", fx.fact_ids)
    for fid in fx.fact_ids:
        srcs = {n.node for n in adj[fid] if n.kind is EdgeKind.DERIVED_FROM and n.outgoing}
        assert srcs and srcs <= ep_ids
        assert set(facts[fid].extra["sources"].split(",")) == srcs
    reflections = await reflect.on_facts(fx)
    assert reflections
    assert await reflect.on_facts(fx) == []  # redelivery: nothing new
    kinds = set()
    all_ids = [*ep_ids, *fx.fact_ids, *fx.concept_ids, *reflections]
    for lst in (await graph.neighbours("acme", all_ids)).values():
        kinds |= {n.kind for n in lst}
    assert kinds == {
        EdgeKind.NEXT,
        EdgeKind.DERIVED_FROM,
        EdgeKind.HAS_CONCEPT,
        EdgeKind.ABOUT_CONCEPT,
        EdgeKind.DERIVED_FROM_FACT,
    }

    # Redelivering every episode event changes nothing.
    before = await namespace_size(graph)
    for ev in events:
        assert await extract.on_episode(ev) == []
    assert await namespace_size(graph) == before


async def test_chunks_respect_word_limit_and_idle_timeout(settings, graph, index, embedder):
    s = settings.model_copy(update={"chunk_words": 40, "chunk_idle_s": 0.0})
    extract, _, chunks = pipelines(s, graph, index, embedder)
    events = await store_turns(
        graph,
        embedder,
        "acme",
        "c2",
        DIALOGUE * 2,
        datetime(2023, 6, 1, 10, 0, tzinfo=UTC),
        eos_last=False,
    )
    produced = []
    for ev in events:
        produced += await extract.on_episode(ev)
    assert len(produced) >= 3
    # every fact's sources lie inside one chunk of ≤ 40 words (turns are never split)
    leftover = await chunks.episodes("acme", "c2")
    assert leftover  # the last chunk is still open
    produced += await extract.close_idle()
    assert await chunks.episodes("acme", "c2") == []
    nodes = await graph.get_nodes("acme", [e.episode_id for e in events])
    assert all("chunk" in n.extra for n in nodes.values())
    per_chunk: dict[str, list[int]] = {}
    for ev in events:
        cid = nodes[ev.episode_id].extra["chunk"]
        per_chunk.setdefault(cid, []).append(len(ev.raw_text.split()))
    assert len(per_chunk) == len(produced)
    for words in per_chunk.values():
        # only a chunk made of a single long turn may exceed the limit
        assert sum(words) <= 40 or len(words) == 1, per_chunk


async def test_concepts_are_canonical_and_per_tenant(settings, graph, index, embedder):
    extract, _, _ = pipelines(settings, graph, index, embedder)
    start = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    out = {}
    for tenant in ("t1", "t2"):
        events = await store_turns(graph, embedder, tenant, "same", DIALOGUE, start)
        res = []
        for ev in events:
            res += await extract.on_episode(ev)
        out[tenant] = res[0]
    assert set(out["t1"].concept_ids).isdisjoint(out["t2"].concept_ids)
    concepts = await graph.get_nodes("t1", out["t1"].concept_ids)
    labels = [c.text for c in concepts.values()]
    assert all(c.kind is NodeKind.CONCEPT for c in concepts.values())
    assert len(labels) == len(set(labels))
    assert not any(name in lab for lab in labels for name in ("caroline", "melanie"))
