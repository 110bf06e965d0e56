"""Per-chunk work that must not grow with the tenant (issue 19), against the real Redis.

A concept of a large tenant holds thousands of facts. Reflection used to read every one of them
(the concept's whole adjacency, then every fact node and its adjacency) for each chunk about it;
now it reads a bounded share, the same share as before on a small concept.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pytest

from gaama import ids
from gaama.events import FactsExtracted
from gaama.extract.offline import OfflineExtractor
from gaama.extract.reflection import ReflectDeps, ReflectionPipeline
from gaama.extract.types import ReflectionDraft, ReflectionInput
from gaama.model import Edge, EdgeKind, Neighbour, Node, NodeKind
from gaama.store.bulk import BulkLoader
from gaama.store.graph import GraphStore

pytestmark = pytest.mark.requires_stack

T = "acme"
WHEN = datetime(2024, 1, 1, tzinfo=UTC).timestamp()


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _fact(i: int, conv: str = "c1") -> Node:
    text = f"Caroline went hiking near lake number {i} with friends."
    return Node(
        id=ids.fact_id(T, text),
        tenant=T,
        kind=NodeKind.FACT,
        text=text,
        time=WHEN + i,
        conversation=conv,
        subject="Caroline",
        extra={"sources": ""},
    )


def _episode(i: int) -> Node:
    return Node(
        id=ids.episode_id(T, "c1", f"D1:{i}"),
        tenant=T,
        kind=NodeKind.EPISODE,
        text=f"Caroline: hiking story {i}",
        time=WHEN + i,
        conversation="c1",
        turn_id=f"D1:{i}",
        speaker="Caroline",
    )


def _concept(label: str) -> Node:
    return Node(id=ids.concept_id(T, label), tenant=T, kind=NodeKind.CONCEPT, text=label)


async def _load_concept(
    graph: GraphStore, label: str, facts: int, episodes: int, dim: int, seed: int = 0
) -> tuple[Node, list[Node]]:
    """A concept with ``facts`` facts about it and ``episodes`` episodes having it, edges
    interleaved (the adjacency holds both kinds, in write order)."""
    rng = np.random.default_rng(seed)
    loader = BulkLoader(graph)
    concept = _concept(label)
    fact_nodes = [_fact(i) for i in range(facts)]
    ep_nodes = [_episode(i) for i in range(episodes)]
    await loader.write_batch(T, [concept], _unit(rng, 1, dim))
    step = 500  # nodes per transaction: each is indexed (HNSW) inside it
    for start in range(0, max(facts, episodes), step):
        fs = fact_nodes[start : start + step]
        es = ep_nodes[start : start + step]
        edges: list[Edge] = []
        for j in range(max(len(fs), len(es))):
            if j < len(fs):
                edges.append(Edge(fs[j].id, concept.id, EdgeKind.ABOUT_CONCEPT))
            if j < len(es):
                edges.append(Edge(es[j].id, concept.id, EdgeKind.HAS_CONCEPT))
        batch = [*fs, *es]
        await loader.write_batch(T, batch, _unit(rng, len(batch), dim), edges)
    return concept, fact_nodes


def _about(adj: Sequence[Neighbour]) -> list[str]:
    return [nb.node for nb in adj if nb.kind is EdgeKind.ABOUT_CONCEPT and not nb.outgoing]


async def test_bounded_neighbour_read_equals_the_full_read_on_a_small_node(graph, index, settings):
    concept, _ = await _load_concept(graph, "hiking", facts=40, episodes=30, dim=settings.embed_dim)
    full = _about((await graph.neighbours(T, [concept.id]))[concept.id])
    assert len(full) == 40
    got = await graph.neighbours_of_kind(
        T, [concept.id], EdgeKind.ABOUT_CONCEPT, outgoing=False, limit=500
    )
    assert got[concept.id] == full  # same facts, same order
    first = await graph.neighbours_of_kind(
        T, [concept.id], EdgeKind.ABOUT_CONCEPT, outgoing=False, limit=7
    )
    assert first[concept.id] == full[:7]
    none = await graph.neighbours_of_kind(
        T, [ids.concept_id(T, "absent")], EdgeKind.ABOUT_CONCEPT, outgoing=False, limit=7
    )
    assert none == {ids.concept_id(T, "absent"): []}


async def test_bounded_neighbour_read_of_a_hub_stops_at_the_limit(graph, index, settings):
    concept, facts = await _load_concept(
        graph, "hiking", facts=10_000, episodes=2_000, dim=settings.embed_dim
    )
    got = (
        await graph.neighbours_of_kind(
            T, [concept.id], EdgeKind.ABOUT_CONCEPT, outgoing=False, limit=300
        )
    )[concept.id]
    assert len(got) == 300
    assert set(got) <= {f.id for f in facts}  # facts about it, never its episodes


class Counting(GraphStore):
    """The real store, counting the node hashes and adjacency hashes a caller reads."""

    nodes_read = 0
    adjacencies_read = 0

    async def get_nodes(self, tenant: str, node_ids: Sequence[str]) -> dict[str, Node]:
        self.nodes_read += len(node_ids)
        return await super().get_nodes(tenant, node_ids)

    async def get_fields(
        self, tenant: str, node_ids: Sequence[str], fields: Sequence[str]
    ) -> dict[str, list[bytes | None]]:
        self.nodes_read += len(node_ids)
        return await super().get_fields(tenant, node_ids, fields)

    async def neighbours(self, tenant: str, node_ids: Sequence[str]) -> dict[str, list[Neighbour]]:
        self.adjacencies_read += len(node_ids)
        return await super().neighbours(tenant, node_ids)


class Recording(OfflineExtractor):
    def __init__(self) -> None:
        super().__init__()
        self.given: list[ReflectionInput] = []

    async def reflect(
        self, facts: list[ReflectionInput], existing: list[str]
    ) -> list[ReflectionDraft]:
        self.given = list(facts)
        return await super().reflect(facts, existing)


async def _reflect_new_fact(
    graph: GraphStore, index, settings, embedder
) -> tuple[Counting, Recording]:
    new = _fact(99_999, conv="c2")
    [vec] = await embedder.embed([new.text])
    await BulkLoader(graph).write_batch(
        T, [new], [vec], [Edge(new.id, ids.concept_id(T, "hiking"), EdgeKind.ABOUT_CONCEPT)]
    )
    counting = Counting(graph.redis, graph.keys)
    extractor = Recording()
    pipeline = ReflectionPipeline(ReflectDeps(settings, counting, index, embedder, extractor))
    event = FactsExtracted(
        tenant=T,
        conversation="c2",
        chunk_id="chunk-1",
        fact_ids=[new.id],
        new_fact_ids=[new.id],
        concept_ids=[ids.concept_id(T, "hiking")],
        extractor="offline",
    )
    await pipeline.on_facts(event)
    return counting, extractor


async def test_reflection_on_a_hub_concept_reads_what_the_budget_admits(
    graph, index, settings, embedder
):
    """10,000 facts about one concept: the chunk's reflection reads a few hundred of them (the
    old code read all 10,000 nodes and their adjacency), and still fills its word budget."""
    await _load_concept(graph, "hiking", facts=10_000, episodes=2_000, dim=settings.embed_dim)
    counting, extractor = await _reflect_new_fact(graph, index, settings, embedder)
    words = sum(len(f.text.split()) for f in extractor.given)
    assert words <= settings.context_words
    assert words > settings.context_words - 20  # the budget is used, not starved
    assert extractor.given[0].text.startswith("Caroline went hiking near lake number 99999")
    assert counting.nodes_read < 1_000
    assert counting.adjacencies_read < 1_000


async def test_reflection_on_a_small_concept_gets_every_fact_about_it(
    graph, index, settings, embedder
):
    """On a concept of 30 facts nothing is cut: every fact about it reaches the extractor, in
    the adjacency's order, after the new fact, as the exhaustive read gave them."""
    concept, facts = await _load_concept(
        graph, "hiking", facts=30, episodes=10, dim=settings.embed_dim
    )
    _, extractor = await _reflect_new_fact(graph, index, settings, embedder)
    full = _about((await graph.neighbours(T, [concept.id]))[concept.id])
    given = [f.id for f in extractor.given]
    # the new fact first, then the concept's facts (the new fact's own edge is the last one)
    assert given[0] == full[-1]
    assert given[1 : len(full)] == full[:-1]
    assert {f.id for f in facts} <= set(given)
