"""Reflection: new facts → higher-level insights combining several facts (no Kafka here).

For a chunk with new facts, related facts are gathered — those sharing a concept with a new fact
(two hops: fact → concept → fact) and those nearest in embedding — up to ~2000 words, with the
nearby existing reflections. The extractor proposes insights; each must cite ≥ 2 of the given
facts. Exact or near-duplicates (cosine ≥ reflection_dedupe_similarity) of existing reflections
are skipped. Nodes, vectors, DERIVED_FROM_FACT edges and the chunk's "reflected" mark are written
in one MULTI/EXEC, so a redelivered event changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import numpy as np

from gaama import ids, tracing
from gaama.config import Settings
from gaama.embed import Embedder
from gaama.errors import NodesGone
from gaama.events import FactsExtracted
from gaama.extract.base import Extractor
from gaama.extract.types import ReflectionInput, word_count
from gaama.model import Edge, EdgeKind, Node, NodeKind
from gaama.store.codecs import as_text
from gaama.store.graph import GraphStore
from gaama.store.outbox import Outbox
from gaama.store.vectors import VectorIndex

log = logging.getLogger("gaama.reflect")

RELATED_PER_FACT = 8
#: Fewest words a fact has ("X went hiking (said on 8 May 2023)."): with the word budget, bounds
#: how many facts of one concept can ever be given to the extractor.
MIN_FACT_WORDS = 4
_PAGE = 64  # candidate facts read per round trip


@dataclass(frozen=True, slots=True)
class _Fact:
    text: str
    subject: str
    time: float


@dataclass
class ReflectDeps:
    settings: Settings
    graph: GraphStore
    index: VectorIndex
    embedder: Embedder
    extractor: Extractor
    outbox: Outbox | None = None


class ReflectionPipeline:
    def __init__(self, deps: ReflectDeps) -> None:
        self.d = deps
        self.s = deps.settings

    async def on_facts(self, ev: FactsExtracted) -> list[str]:
        """Write reflections for the chunk; returns the ids of reflections written.

        Reflections are written only while every fact they cite exists: a forget that removes
        one meanwhile makes the chunk be reflected again from the facts that are left.
        """
        with tracing.span(
            "reflect",
            lambda: {
                "gaama.tenant.digest": tracing.tenant_digest(ev.tenant),
                "gaama.chunk.id": ev.chunk_id,
                "gaama.facts.new": len(ev.new_fact_ids),
            },
        ):
            return await self._on_facts(ev)

    async def _on_facts(self, ev: FactsExtracted) -> list[str]:
        written: list[str] = []
        for _ in range(3):
            try:
                written = await self._reflect(ev)
                break
            except NodesGone as exc:
                log.info("chunk %s: facts forgotten while reflecting (%s)", ev.chunk_id, exc)
        if self.d.outbox is not None:  # handled: extraction need not send the event again
            await self.d.outbox.done(ev.tenant, ev.chunk_id)
        return written

    async def _within_budget(self, tenant: str, candidates: list[str]) -> dict[str, _Fact]:
        """The candidates, in order, that fit ``context_words`` (missing ones skipped), read a
        page at a time (text, subject and time only: not the vectors) so that a long candidate
        list costs only what the budget admits."""
        budget = self.s.context_words
        out: dict[str, _Fact] = {}
        for start in range(0, len(candidates), _PAGE):
            page = candidates[start : start + _PAGE]
            rows = await self.d.graph.get_fields(tenant, page, ["text", "subject", "time"])
            for fid in page:
                if (row := rows.get(fid)) is None:
                    continue
                text, subject, when = (as_text(x) for x in row)
                budget -= word_count(text)
                if budget < 0:
                    return out
                out[fid] = _Fact(text, subject, float(when or 0))
        return out

    async def _reflect(self, ev: FactsExtracted) -> list[str]:
        t = ev.tenant
        mark = f"reflected:{ev.chunk_id}"
        if not ev.new_fact_ids or await self.d.graph.get_state(t, mark) is not None:
            return []
        dim = self.d.embedder.dim
        new_facts = await self.d.graph.get_nodes(t, ev.new_fact_ids)
        if not new_facts:
            return []
        order = list(new_facts)
        vecs = await self.d.graph.vectors(t, order, dim)
        # facts sharing a concept with a new fact: a bounded read per concept (a concept of a
        # large tenant holds thousands of facts; the word budget admits a few hundred at most)
        adj = await self.d.graph.neighbours(t, order)
        concept_ids = list(
            dict.fromkeys(
                nb.node for i in order for nb in adj[i] if nb.kind is EdgeKind.ABOUT_CONCEPT
            )
        )
        per_concept = await self.d.graph.neighbours_of_kind(
            t,
            concept_ids,
            EdgeKind.ABOUT_CONCEPT,
            outgoing=False,
            limit=self.s.context_words // MIN_FACT_WORDS,
        )
        shared = [f for c in concept_ids for f in per_concept[c]]
        similar: list[str] = []
        for hits in await asyncio.gather(
            *(self.d.index.knn(t, v, RELATED_PER_FACT, kinds=[NodeKind.FACT]) for v in vecs)
        ):
            similar += [h.id for h in hits]
        candidates = list(dict.fromkeys([*order, *shared, *similar]))
        nodes = await self._within_budget(t, candidates)
        cadj_by_fact = await self.d.graph.neighbours(t, list(nodes))
        concept_nodes = await self.d.graph.get_nodes(t, concept_ids)
        inputs = [
            ReflectionInput(
                id=fid,
                text=n.text,
                concepts=tuple(
                    concept_nodes[nb.node].text
                    for nb in cadj_by_fact.get(fid, ())
                    if nb.kind is EdgeKind.ABOUT_CONCEPT and nb.node in concept_nodes
                ),
                subject=n.subject,
            )
            for fid, n in nodes.items()
        ]
        centre = vecs.mean(axis=0)
        near = (
            await self.d.index.knn(t, centre, 10, kinds=[NodeKind.REFLECTION])
            if np.any(centre)
            else []
        )
        existing = [
            n.text for n in (await self.d.graph.get_nodes(t, [h.id for h in near])).values()
        ]
        drafts = await self.d.extractor.reflect(inputs, existing)
        given = {i.id for i in inputs}
        drafts = [d for d in drafts if len(set(d.fact_ids) & given) >= 2 and d.text.strip()]
        written: list[Node] = []
        edges: list[Edge] = []
        if drafts:
            dvecs = await self.d.embedder.embed([d.text for d in drafts])
            for d, v in zip(drafts, dvecs, strict=True):
                rid = ids.reflection_id(t, d.text)
                if await self.d.graph.exists(t, rid) or any(w.id == rid for w in written):
                    continue
                hits = await self.d.index.knn(t, v, 1, kinds=[NodeKind.REFLECTION])
                if hits and hits[0].similarity >= self.s.reflection_dedupe_similarity:
                    continue
                if any(
                    float(np.dot(v, np.asarray(w.vector))) >= self.s.reflection_dedupe_similarity
                    for w in written
                ):
                    continue
                facts = [f for f in dict.fromkeys(d.fact_ids) if f in given]
                times = [nodes[f].time for f in facts if f in nodes]
                written.append(
                    Node(
                        id=rid,
                        tenant=t,
                        kind=NodeKind.REFLECTION,
                        text=d.text,
                        time=max(times or [0.0]),
                        conversation=ev.conversation,
                        subject=d.subject,
                        vector=v.tolist(),
                    )
                )
                edges += [Edge(rid, f, EdgeKind.DERIVED_FROM_FACT) for f in facts]
        with tracing.span("reflections.write", lambda: {"gaama.reflections": len(written)}):
            await self.d.graph.write(
                t,
                written,
                edges,
                set_state={mark: "1"},
                require=list(dict.fromkeys(e.dst for e in edges)),
            )
        log.info(
            "chunk %s: %d reflections from %d facts (%s)",
            ev.chunk_id,
            len(written),
            len(inputs),
            self.d.extractor.name,
        )
        return [w.id for w in written]
