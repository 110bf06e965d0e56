"""Extraction: episodes → chunks → facts and concepts in the graph (no Kafka here).

Per conversation, episodes collect in an open chunk (Redis, :mod:`gaama.store.chunks`) of at most
``chunk_words`` words, never splitting a turn. A chunk closes when the next turn would overflow
it, on an end-of-session marker, or after ``chunk_idle_s`` without new turns. Closing runs one
extractor call with context (similar older episodes, their facts, nearby concepts; ~2000 words),
canonicalises concepts, dedupes facts, and writes everything — nodes, vectors, DERIVED_FROM /
HAS_CONCEPT / ABOUT_CONCEPT edges, the episodes' "extracted" marks and the chunk trim — in one
MULTI/EXEC. A redelivered episode is recognised (in the chunk, or marked) and changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from gaama import ids, tracing
from gaama.config import Settings
from gaama.embed import Embedder
from gaama.errors import ChunkBusy, NodesGone
from gaama.events import EpisodeStored, FactsExtracted, encode
from gaama.extract.base import Extractor
from gaama.extract.concepts import canonicalize_label
from gaama.extract.context import node_texts, read_context
from gaama.extract.dedupe import FactDedupe, fact_writes
from gaama.extract.lease import CloseLeases
from gaama.extract.supersede import Known, endings, ends_one
from gaama.extract.types import EpisodeView, FactDraft, word_count
from gaama.extract.updates import CurrentFact, retracted, retraction_request
from gaama.metrics import LLMMetrics
from gaama.model import Edge, EdgeKind, Node, NodeKind
from gaama.store.chunks import ChunkStore
from gaama.store.codecs import as_text
from gaama.store.graph import GraphStore
from gaama.store.outbox import Outbox
from gaama.store.validity import LEARNED_AT, VALID_FROM, Ending
from gaama.store.vectors import Hit, VectorIndex

log = logging.getLogger("gaama.extract")

#: Times a chunk is re-extracted when a forget removes its sources mid-way.
_GONE_RETRIES = 3
#: The close lock's lease when GAAMA_CHUNK_LOCK_S is unset; renewed every third of it.
DEFAULT_LOCK_S = 15.0


#: Fields read with each related fact found for a new one (the update rules read them).
_RELATED_FIELDS = ("text", "time", VALID_FROM)
#: Fields read with each fact a retraction may name: its sources tell whose statement it is.
_RETRACT_FIELDS = ("text", "time", VALID_FROM, "sources")


@dataclass(frozen=True, slots=True)
class Retractions:
    """What a chunk's requests to forget (or "that's not true any more") retract: the facts they
    end, and the nodes whose words go."""

    endings: list[Ending]
    redact: dict[str, list[str]]  # request episode id -> node ids to redact


def _known(fid: str, draft: FactDraft, by_id: dict[str, EpisodeView], chunk_ids: set[str]) -> Known:
    """A draft as the update rules read it: valid from its latest source turn's time."""
    times = [by_id[s].timestamp.timestamp() for s in draft.source_episode_ids if s in chunk_ids]
    return Known(fid, draft.text, draft.subject, max(times, default=0.0))


def _hit_known(hit: Hit, subject: str) -> Known:
    """A related fact found by the same-subject search, as the update rules read it."""
    f = hit.fields
    since = f.get(VALID_FROM) or f.get("time") or "0"
    return Known(hit.id, f.get("text", ""), subject, float(since))


def label_text(label: str) -> str:
    """What a concept label is embedded as: ``pottery_hobby`` → ``pottery hobby``."""
    return label.replace("_", " ")


@dataclass
class ExtractDeps:
    settings: Settings
    graph: GraphStore
    index: VectorIndex
    chunks: ChunkStore
    embedder: Embedder
    extractor: Extractor
    llm_metrics: LLMMetrics | None = None
    clock: object = field(default=time.time)
    outbox: Outbox | None = None


class ExtractionPipeline:
    def __init__(self, deps: ExtractDeps) -> None:
        self.d = deps
        self.s = deps.settings
        self._leases = CloseLeases(deps.chunks, self.s.chunk_lock_s or DEFAULT_LOCK_S)

    def _now(self) -> float:
        return float(self.d.clock())  # type: ignore[operator]

    async def on_episode(self, ev: EpisodeStored) -> list[FactsExtracted]:
        """Add an episode to its conversation's chunk; return what closing chunks produced."""
        out: list[FactsExtracted] = []
        t, conv = ev.tenant, ev.conversation
        words = max(1, word_count(ev.raw_text))
        res = await self.d.chunks.append(
            t, conv, ev.episode_id, words, self._now(), self.s.chunk_words
        )
        if res.overflow:
            # this turn would overflow the open chunk: close it first, never split a turn
            out += await self._close_all(t, conv, "full")
            res = await self.d.chunks.append(
                t, conv, ev.episode_id, words, self._now(), self.s.chunk_words
            )
            if res.overflow:
                # Another close took the chunk between ours and this append. Appending now
                # would overfill the chunk and move every later boundary.
                raise ChunkBusy(f"the open chunk of {t}/{conv} is being closed elsewhere")
        if res.already_extracted:
            return out
        if ev.end_of_session:
            out += await self._close_all(t, conv, "end_of_session")
        elif res.words >= self.s.chunk_words:
            out += await self._close_all(t, conv, "full")
        return out

    async def _close_all(self, tenant: str, conversation: str, why: str) -> list[FactsExtracted]:
        done = await self.close(tenant, conversation, why)
        return [] if done is None else [done]

    async def close_idle(self, input_quiet_s: float = float("inf")) -> list[FactsExtracted]:
        """Close the chunks of conversations silent for ``chunk_idle_s``, up to
        ``llm_concurrency`` at once (each is another conversation: their extractor calls overlap).

        Args:
            input_quiet_s: How long the caller has had nothing left to process. A chunk is idle
                only if its conversation was silent while the pipeline kept up: after an outage
                or a restart the turns that follow may still be in the backlog, and closing
                before they arrive would move the chunk's boundary (the same turns would make
                other chunks, and other facts, than in a run without the outage).
        """
        if input_quiet_s < self.s.chunk_idle_s:
            return []
        gate = asyncio.Semaphore(self.s.llm_concurrency)

        async def close_one(t: str, conv: str) -> FactsExtracted | None:
            async with gate:
                try:
                    done = await self.close(t, conv, "idle")
                except ChunkBusy:
                    return None  # whoever holds it closes it
                if done is None:
                    await self.d.chunks.forget_if_empty(t, conv)
                return done

        idle = await self.d.chunks.idle(self._now() - self.s.chunk_idle_s)
        closed = await asyncio.gather(
            *(close_one(t, conv) for t, conv in idle), return_exceptions=True
        )
        for outcome in closed:  # a failed close fails the tick, once the others are done
            if isinstance(outcome, BaseException):
                raise outcome
        return [done for done in closed if isinstance(done, FactsExtracted)]

    async def close(self, tenant: str, conversation: str, why: str) -> FactsExtracted | None:
        """Extract and write the open chunk of a conversation; None when it is empty.

        Raises:
            ChunkBusy: another close holds the chunk. A close that must happen (the chunk is
                full, or its session ended) is retried until it can; skipping it would let the
                next turns into this chunk and move its boundary.
        """
        with tracing.span(
            "chunk.close",
            lambda: {"gaama.tenant.digest": tracing.tenant_digest(tenant), "gaama.chunk.why": why},
        ):
            return await self._close(tenant, conversation, why)

    async def _close(self, tenant: str, conversation: str, why: str) -> FactsExtracted | None:
        async with self._leases.held(tenant, conversation) as token:
            for attempt in range(_GONE_RETRIES):
                if attempt and not await self._leases.still_held(token):
                    raise ChunkBusy(f"the close lock of {tenant}/{conversation} lapsed")
                episode_ids = await self.d.chunks.episodes(tenant, conversation)
                if not episode_ids:
                    return None
                try:
                    return await self._extract(tenant, conversation, episode_ids, why)
                except NodesGone as exc:
                    # A forget removed some of the chunk's episodes (or a fact it extends) while
                    # the extractor ran: what was computed from them must not be written.
                    log.info("chunk %s/%s changed under a forget: %s", tenant, conversation, exc)
                    await self.d.chunks.remove(tenant, conversation, exc.missing, 0)
            return None

    async def _load_chunk(self, tenant: str, episode_ids: list[str]) -> list[EpisodeView]:
        nodes = await self.d.graph.get_nodes(tenant, episode_ids)
        return [
            EpisodeView(
                id=i,
                speaker=n.speaker,
                raw_text=n.extra.get("raw", n.text),
                text=n.text,
                timestamp=datetime.fromtimestamp(n.time, tz=UTC),
                turn_id=n.turn_id,
            )
            for i in episode_ids
            if (n := nodes.get(i)) is not None
        ]

    async def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.d.embedder.dim), dtype=np.float32)
        return await self.d.embedder.embed(texts)

    def _canonical_concepts(
        self,
        tenant: str,
        labels: list[str],
        unseen: list[str],
        vecs: np.ndarray,
        searches: list[list[Any]],
        found: dict[str, str],
    ) -> tuple[dict[str, str], dict[str, Node]]:
        """Map each distinct raw label to its canonical label; new concept nodes (with vectors)
        by label.

        Reuse order: the same label (same id), an existing concept whose embedding is within
        ``concept_merge_similarity``, a string near-duplicate among the nearest existing labels
        or the labels of this chunk. Concepts never merge across tenants: every lookup is scoped.
        Only the ``unseen`` labels (those the tenant does not hold yet) were embedded (``vecs``)
        and searched for (``searches``: one nearest-neighbour search each, whatever the tenant's
        number of concepts; ``found``: the texts of their hits).
        """
        mapping: dict[str, str] = {}
        new: dict[str, Node] = {}
        for label, vec, hits in zip(unseen, vecs, searches, strict=True):
            near = {h.id: found[h.id] for h in hits if h.id in found}
            if (
                hits
                and hits[0].similarity >= self.s.concept_merge_similarity
                and hits[0].id in near
            ):
                mapping[label] = near[hits[0].id]
                continue
            candidates = [*near.values(), *new]
            chosen = canonicalize_label(label, candidates, threshold=self.s.concept_merge_fuzz)
            if chosen != label:  # a near-duplicate of an existing or an earlier new label
                mapping[label] = chosen
                continue
            mapping[label] = label
            new[label] = Node(
                id=ids.concept_id(tenant, label),
                tenant=tenant,
                kind=NodeKind.CONCEPT,
                text=label,
                vector=vec.tolist(),
            )
        # a label the tenant holds is its own canonical label; the order is the labels'
        return {x: mapping.get(x, x) for x in labels}, new

    async def _retractions(
        self, tenant: str, chunk: list[EpisodeView], fresh: list[Node]
    ) -> Retractions:
        """The facts each request of ``chunk`` to forget or un-say retracts: the speaker's own
        earlier statements in their memory (facts about them with a source turn of theirs),
        among the stored facts nearest what the request names and the chunk's new facts. A
        request to forget also redacts those facts and the speaker's turns they came from."""
        out = Retractions([], {})
        requests = [(ep, r) for ep in chunk if (r := retraction_request(ep.raw_text)) is not None]
        if not requests or self.s.supersede_candidates <= 0:
            return out
        vecs = await self._embed([r.target or ep.raw_text for ep, r in requests])
        found = await asyncio.gather(
            *(
                self.d.index.knn(
                    tenant,
                    v,
                    self.s.supersede_candidates,
                    kinds=[NodeKind.FACT],
                    subject=ep.speaker or None,
                    fields=_RETRACT_FIELDS,
                )
                for (ep, _), v in zip(requests, vecs, strict=True)
            )
        )
        facts: dict[str, tuple[str, str, float, tuple[str, ...]]] = {}
        for hits in found:
            for h in hits:
                since = h.fields.get(VALID_FROM) or h.fields.get("time") or "0"
                sources = tuple(x for x in h.fields.get("sources", "").split(",") if x)
                facts[h.id] = (h.fields.get("text", ""), "", float(since), sources)
        for node in fresh:
            sources = tuple(x for x in node.extra.get("sources", "").split(",") if x)
            facts[node.id] = (node.text, node.subject, float(node.time), sources)
        subjects = {n.id: n.subject for n in fresh}
        episodes = list(dict.fromkeys(s for f in facts.values() for s in f[3]))
        said_by = {
            e: as_text(row[0])
            for e, row in (await self.d.graph.get_fields(tenant, episodes, ["speaker"])).items()
        }
        for ep, request in requests:
            when = ep.timestamp.timestamp()
            own = {  # the speaker's statements about themself, made before the request
                fid: [s for s in f[3] if said_by.get(s) == ep.speaker and s != ep.id]
                for fid, f in facts.items()
                if subjects.get(fid, ep.speaker) == ep.speaker and ep.id not in f[3]
            }
            current = [
                CurrentFact(fid, facts[fid][0], facts[fid][2])
                for fid, mine in own.items()
                if mine and facts[fid][2] <= when
            ]
            ended = retracted(request, ep.speaker, current, when)
            out.endings.extend(Ending(ep.id, e.fact_id, "retracted", when) for e in ended)
            if request.redact and self.s.redact_retracted and ended:
                nodes = [e.fact_id for e in ended] + [s for e in ended for s in own[e.fact_id]]
                out.redact[ep.id] = list(dict.fromkeys(nodes))
        return out

    async def _extract(
        self, tenant: str, conversation: str, episode_ids: list[str], why: str
    ) -> FactsExtracted:
        chunk = await self._load_chunk(tenant, episode_ids)
        context = await read_context(
            self.d.graph, self.d.index, self.d.embedder.dim, self.s, tenant, chunk
        )
        started = time.perf_counter()
        try:
            with tracing.span(
                "chunk.extract",
                lambda: {"gaama.extractor": self.d.extractor.name, "gaama.episodes": len(chunk)},
            ):
                result = await self.d.extractor.extract(chunk, context)
        finally:
            if self.d.llm_metrics and self.d.extractor.name == "offline":
                # The LLM client counts its own calls; count the offline extractor's here.
                self.d.llm_metrics.calls.labels("offline", "ok").inc()
                self.d.llm_metrics.seconds.observe(time.perf_counter() - started)
        chunk_ids = {e.id for e in chunk}
        by_id = {e.id: e for e in chunk}
        raw_labels = [lab for labs in result.episode_concepts.values() for lab in labs]
        raw_labels += [lab for f in result.facts for lab in f.concepts]
        labels = list(dict.fromkeys(raw_labels))
        own_id = {  # the facts that can be stored: a source in this chunk, and a text
            i: ids.fact_id(tenant, d.text)
            for i, d in enumerate(result.facts)
            if d.text.strip() and any(s in chunk_ids for s in d.source_episode_ids)
        }
        label_ids = [ids.concept_id(tenant, x) for x in labels]
        present = await self.d.graph.existing(tenant, [*label_ids, *own_id.values()])
        unseen = [x for x, i in zip(labels, label_ids, strict=True) if i not in present]
        # Only new texts are embedded, labels and facts in one call, and searched for: a label
        # the tenant holds is its own canonical one, a stored fact its own duplicate.
        first = {f: i for i, f in reversed(list(own_id.items()))}
        searched = list(dict.fromkeys(f for f in own_id.values() if f not in present))
        vecs = await self._embed(
            [label_text(x) for x in unseen] + [result.facts[first[f]].text for f in searched]
        )
        label_vecs, fact_vecs = vecs[: len(unseen)], vecs[len(unseen) :]
        label_hits, fact_hits = await asyncio.gather(
            asyncio.gather(
                *(self.d.index.knn(tenant, v, 5, kinds=[NodeKind.CONCEPT]) for v in label_vecs)
            ),
            asyncio.gather(
                *(
                    self.d.index.knn(
                        tenant,
                        v,
                        max(1, self.s.supersede_candidates),
                        kinds=[NodeKind.FACT],
                        subject=result.facts[first[f]].subject or None,
                        fields=_RELATED_FIELDS,
                    )
                    for f, v in zip(searched, fact_vecs, strict=True)
                )
            ),
        )
        found = await node_texts(
            self.d.graph, tenant, list(dict.fromkeys(h.id for hits in label_hits for h in hits))
        )
        mapping, new_concepts = self._canonical_concepts(
            tenant, labels, unseen, label_vecs, label_hits, found
        )
        cid = {lab: ids.concept_id(tenant, mapping[lab]) for lab in mapping}

        edges: list[Edge] = []
        for eid, of_episode in result.episode_concepts.items():
            if eid in chunk_ids:
                edges += [
                    Edge(eid, cid[lab], EdgeKind.HAS_CONCEPT) for lab in dict.fromkeys(of_episode)
                ]
        dedupe = FactDedupe(own_id, present, dict(zip(searched, fact_vecs, strict=True)))
        drafts = {  # each searched text as the update rules read it
            f: _known(f, result.facts[first[f]], by_id, chunk_ids) for f in searched
        }
        dedupe.near_duplicates(
            searched,
            fact_hits,
            self.s.fact_dedupe_similarity,
            apart=lambda own, hit: ends_one(drafts[own], _hit_known(hit, drafts[own].subject)),
        )
        fact_nodes, fact_fields, all_fact_ids, new_fact_ids = await fact_writes(
            self.d.graph, self._embed, tenant, conversation, result.facts, dedupe, chunk_ids, by_id
        )
        learned = repr(self._now())
        for node in fact_nodes:  # valid from its source turn's session time
            node.extra.setdefault(VALID_FROM, repr(float(node.time)))
            node.extra.setdefault(LEARNED_AT, learned)
        for draft, fid in zip(result.facts, all_fact_ids, strict=True):
            if fid is None:
                continue
            edges += [
                Edge(fid, src, EdgeKind.DERIVED_FROM)
                for src in dict.fromkeys(draft.source_episode_ids)
                if src in chunk_ids
            ]
            edges += [
                Edge(fid, cid[lab], EdgeKind.ABOUT_CONCEPT) for lab in dict.fromkeys(draft.concepts)
            ]
        ended: list[Ending] = []
        if self.s.supersede_candidates > 0:
            near = dict(zip(searched, fact_hits, strict=True))
            fresh = [Known(n.id, n.text, n.subject, n.time) for n in fact_nodes]
            related = {
                k.id: [_hit_known(h, k.subject) for h in near.get(k.id, []) if h.id != k.id]
                for k in fresh
            }
            ended = endings(fresh, related)
            edges += [Edge(e.new, e.old, EdgeKind.SUPERSEDES) for e in ended]
        taken = await self._retractions(tenant, chunk, fact_nodes)
        written = {n.id for n in fact_nodes}
        stored_ended = [e.old for e in ended if e.old not in written]
        chunk_id = ids.chunk_id(tenant, conversation, episode_ids[0], episode_ids[-1])
        words = sum(max(1, word_count(e.raw_text)) for e in chunk)
        # episodes whose node vanished still leave the chunk
        close = self.d.chunks.close_ops(
            tenant, conversation, len(episode_ids), words, chunk_id, [e.id for e in chunk]
        )
        fact_ids = list(dict.fromkeys(f for f in all_fact_ids if f is not None))
        event = FactsExtracted(
            tenant=tenant,
            conversation=conversation,
            chunk_id=chunk_id,
            fact_ids=fact_ids,
            new_fact_ids=new_fact_ids,
            concept_ids=list(dict.fromkeys(cid.values())),
            extractor=self.d.extractor.name,
        )
        outbox = self.d.outbox
        queue = [close, self.d.graph.supersede_ops(tenant, [*ended, *taken.endings], self._now())]
        queue += [
            self.d.graph.redact_ops(tenant, nodes, request, self._now())
            for request, nodes in taken.redact.items()
        ]
        if outbox is not None:  # the event waits with the data until reflect has handled it
            queue.append(outbox.add_ops(tenant, chunk_id, encode(event), self._now()))
        with tracing.span(
            "facts.write",
            lambda: {
                "gaama.tenant.digest": tracing.tenant_digest(tenant),
                "gaama.chunk.id": chunk_id,
                "gaama.facts": len(fact_ids),
                "gaama.facts.new": len(new_fact_ids),
                "gaama.concepts.new": len(new_concepts),
            },
        ):
            await self.d.graph.write(
                tenant,
                [*fact_nodes, *new_concepts.values()],
                edges,
                node_fields=fact_fields,
                also=queue,
                # an ended fact stored before must still be there (a forget may have removed it)
                require=list(dict.fromkeys([*chunk_ids, *fact_fields, *stored_ended])),
            )
        if outbox is not None:
            await outbox.announce(tenant)
        await self.d.chunks.forget_if_empty(tenant, conversation)
        log.info(
            "chunk %s (%s, %d episodes, %s): %d facts (%d new), %d new concepts",
            chunk_id,
            why,
            len(chunk),
            self.d.extractor.name,
            len(fact_ids),
            len(new_fact_ids),
            len(new_concepts),
        )
        return event
