"""The context of a chunk's extraction: similar older episodes, their facts, nearby concepts
(read from the tenant's graph and vector index, within a word budget)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import numpy as np

from gaama.config import Settings
from gaama.extract.types import ContextFact, EpisodeView, ExtractionContext, word_count
from gaama.model import EdgeKind, NodeKind
from gaama.store.codecs import as_text
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex


async def read_context(
    graph: GraphStore,
    index: VectorIndex,
    dim: int,
    s: Settings,
    tenant: str,
    chunk: list[EpisodeView],
) -> ExtractionContext:
    """What the extractor sees beside ``chunk``: the ``context_episodes`` older episodes most
    similar to the chunk's centre, their facts, and the ``context_concepts`` nearest concepts,
    within ``context_words`` words (most similar first)."""
    vecs = await graph.vectors(tenant, [e.id for e in chunk], dim)
    centre = vecs.mean(axis=0)
    if not np.any(centre):
        return ExtractionContext()
    in_chunk = {e.id for e in chunk}
    # independent reads go out together: four round trips one after another, not seven
    hits, concepts = await asyncio.gather(
        index.knn(tenant, centre, s.context_episodes + len(chunk), kinds=[NodeKind.EPISODE]),
        index.knn(tenant, centre, s.context_concepts, kinds=[NodeKind.CONCEPT]),
    )
    older = [h.id for h in hits if h.id not in in_chunk][: s.context_episodes]
    nodes, adj, concept_texts = await asyncio.gather(
        graph.get_nodes(tenant, older),
        graph.neighbours(tenant, older),
        node_texts(graph, tenant, [c.id for c in concepts]),
    )
    fact_ids = list(
        dict.fromkeys(
            nb.node
            for i in older
            for nb in adj.get(i, ())
            if nb.kind is EdgeKind.DERIVED_FROM and not nb.outgoing
        )
    )
    facts = await node_texts(graph, tenant, fact_ids)
    budget = s.context_words
    ctx_eps, ctx_facts = [], []
    for i in older:  # most similar first; stop at the word cap
        if (n := nodes.get(i)) is None or (budget := budget - word_count(n.text)) < 0:
            break
        ctx_eps.append(
            EpisodeView(
                id=i,
                speaker=n.speaker,
                raw_text=n.extra.get("raw", ""),
                text=n.text,
                turn_id=n.turn_id,
                timestamp=datetime.fromtimestamp(n.time, tz=UTC),
            )
        )
    for fid in fact_ids:
        if (f := facts.get(fid)) is None or (budget := budget - word_count(f)) < 0:
            break
        ctx_facts.append(ContextFact(fid, f))
    return ExtractionContext(
        episodes=ctx_eps, facts=ctx_facts, concepts=list(concept_texts.values())
    )


async def node_texts(graph: GraphStore, tenant: str, node_ids: list[str]) -> dict[str, str]:
    """The text of each node that exists, in the order asked (the vectors left in Redis:
    they are most of a node's bytes)."""
    rows = await graph.get_fields(tenant, node_ids, ["text"])
    return {i: as_text(rows[i][0]) for i in node_ids if i in rows}
