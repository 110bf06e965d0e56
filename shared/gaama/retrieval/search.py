"""GAAMA retrieval: KNN seeds, 2-hop expansion, Personalized PageRank, scoring, packing.

Follows ARCHITECTURE.md §1 with the defaults of :class:`~gaama.config.RetrievalSettings`; the
choices the paper leaves open, made here:

- **Pool size.** The paper's ``pool = max(2 × budget, 80)`` counts *items*: with the 1000-word
  budget taken literally the pool would be 2000, 25× the seed count. Here ``pool = max(2 × k,
  floor, ⌈budget_words / 20⌉)``: twice the ranked items asked for, and enough candidates (at ~20
  words per item) to fill a large word budget. The floor is ``pool_min`` (80) in ``semantic``
  mode, where the pool is the only source of candidates: at the defaults (k = 20, 1000 words)
  the paper's 80. In the graph modes it is the seeds (``graph_pool_min``, 40): the expansion's
  read-ahead adds up to ``expanded_candidates`` (80) nodes that the seeds link to, and a pool
  node past the seeds that the walk does not reach ranks below every seed on similarity alone
  (docs/decisions/0001-knn-pool-in-graph-modes.md).
- **Expansion** visits ``hops`` rings around the seeds, following edges both ways, in one
  server-side script call (:meth:`GraphStore.expand`). **Hubs (store degree >
  ``hub_degree``) are not expanded through**: their edges to nodes reached from elsewhere stay in
  the subgraph, their other neighbours never enter it. This is hub dampening applied to the walk's
  reach, and it keeps the subgraph bounded however large a tenant's hubs grow. New nodes are
  admitted in order (frontier in similarity/discovery order, each node's neighbours by walk
  weight) until the subgraph holds ``max_expanded`` (300) nodes; then no further adjacency is
  read. The subgraph holds every edge read on the way; edges between nodes whose adjacency was
  not read (the outermost ring, nodes reached after the subgraph filled) are left out. Every
  node's degree for hub detection is its full store degree (the bound's recall:
  docs/decisions/0003-subgraph-bound-and-read-ahead.md).
- **Expanded candidates.** The KNN pool holds the most similar nodes of the tenant, so an
  expanded node outside it is less similar than every pool node and only PPR can lift it. The
  expansion's own call also reads the stored fields and the float16 vector of the first
  ``expanded_read`` (80) returnable nodes it admitted outside the candidates held (nearest the
  most similar seeds, heaviest edges first; :class:`~gaama.store.subgraph.ReadAhead`): one round
  trip, not two. Their cosine similarity is computed here (the same vectors the index compares),
  and the ``expanded_candidates`` (80) of them with the most PPR mass join the candidates.
- **Provenance** is read only for what is returned (one call after packing); a fact's source
  episode ids come with the KNN reply, so packing can skip an episode a packed fact carries.
- **Scope.** With a subject or conversation filter, expanded nodes outside the scope are dropped
  before they join the subgraph (the authors' expansion ignored scope). Concepts carry no
  conversation; they stay in as bridges and are never returned.
- **Normalisation.** PPR and (negative-clipped) similarity are max-normalised over the returnable
  candidates (facts, reflections, episodes), the set that is scored and ranked.
- **Lexical channel.** The query's words search node text (BM25) beside the KNN search, with
  the same scope filter; matches outside the pool join the candidates, and similarity fused with
  the match (:mod:`gaama.retrieval.lexical`) picks the seeds, weighs their restart mass and
  replaces similarity in the score, in every mode.
- **Time prior.** A period the query names, resolved against the scope's latest turn
  (:mod:`gaama.retrieval.timeq`), adds ``w_time`` to the score of candidates in it.
- **Named people.** A query naming a person whom some candidates are said by (an episode's
  speaker) or about (a fact's or reflection's subject), but not all, adds ``w_person`` to the
  score of that person's candidates (:func:`~gaama.retrieval.candidates.person_prior`).
- **Ranked list.** Each turn is said once (``rank_distinct``): an episode a fact above it carries,
  or a fact whose source episodes are all above it, is passed over.
- **Modes.** ``gaama``: as above. ``semantic``: w_ppr = 0 and no expansion or PPR at all (the
  candidates are the KNN pool). ``ppr``: w_sim = 0, graph structure only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import numpy as np

from gaama import tracing
from gaama.config import RetrievalSettings, Settings
from gaama.embed import Embedder
from gaama.metrics import QUERY_STAGES, QueryMetrics
from gaama.model import EDGE_TYPE_WEIGHTS, NodeKind
from gaama.retrieval.candidates import (
    join_matches,
    person_prior,
    ppr_size,
    run_ppr,
    show,
    time_prior,
)
from gaama.retrieval.current import (
    CHAIN_HOPS,
    current_first,
    inherit,
    packed_current_first,
    prefer_current,
    successors_wanted,
)
from gaama.retrieval.lexical import fuse, query_terms
from gaama.retrieval.pack import (
    RETURNED_KINDS,
    Caps,
    Item,
    Provenance,
    Size,
    distinct_turns,
    pack,
    word_sizes,
)
from gaama.retrieval.pack import total_words as count_words
from gaama.retrieval.request import (
    BUDGET_MAX,
    BUDGET_MIN,
    K_MAX,
    MODES,
    Mode,
    SearchResult,
    budget_of,
    check_request,
    pool_size,
    resolve_params,
)
from gaama.retrieval.scoring import cosine, node_kind, score_candidates
from gaama.retrieval.timeq import query_periods
from gaama.retrieval.tokencount import BudgetUnit, TokenCounter
from gaama.store.codecs import as_text
from gaama.store.graph import GraphStore
from gaama.store.subgraph import Expansion, ReadAhead
from gaama.store.validity import REDACTED_AT, VALIDITY_FIELDS
from gaama.store.vectors import VectorIndex

# The request's bounds and result types are defined in gaama.retrieval.request; callers import
# them from here, with the Retriever.
__all__ = [
    "BUDGET_MAX",
    "BUDGET_MIN",
    "K_MAX",
    "LEXICAL_KINDS",
    "MODES",
    "Mode",
    "Retriever",
    "SearchResult",
    "pool_size",
    "resolve_params",
]

# Stored fields read with each candidate: what an item shows, a fact's source episodes, and who
# the node is said by or about (the named-person prior).
_SHOWN = (
    "text",
    "time",
    "conversation",
    "seq",
    "turn_id",
    "sources",
    "speaker",
    "subject",
    REDACTED_AT,
    *VALIDITY_FIELDS,
)
# Kinds the full-text search reads: a reflection restates what its facts say, so its match
# would count their words twice.
LEXICAL_KINDS = (NodeKind.EPISODE, NodeKind.FACT, NodeKind.CONCEPT)


def _in_scope(fields: Mapping[str, str], subject: str | None, conversation: str | None) -> bool:
    """Whether a node read by id lies in the search's scope (its subject and conversation)."""
    if conversation is not None and fields.get("conversation") != conversation:
        return False
    return subject is None or subject in (fields.get("subject"), fields.get("speaker"))


class Retriever:
    """Searches one tenant's memory; every store call is scoped to the tenant passed in.

    Args:
        graph: The graph store.
        index: The vector index.
        embedder: Query embedder (same model as the stored vectors).
        settings: Settings; ``settings.retrieval`` holds the defaults.
        metrics: Query metrics to observe, if any.
        tokens: Token counter of token budgets (default: the embedder's tokenizer, loaded on
            the first token budget).
    """

    def __init__(
        self,
        graph: GraphStore,
        index: VectorIndex,
        embedder: Embedder,
        settings: Settings,
        *,
        metrics: QueryMetrics | None = None,
        tokens: TokenCounter | None = None,
    ) -> None:
        self.graph = graph
        self.index = index
        self.embedder = embedder
        self.settings = settings
        self.metrics = metrics
        self.tokens = tokens or TokenCounter(settings.onnx_model_dir)

    def token_sizes(self, items: Sequence[Item]) -> list[int]:
        """Tokens of each item's text (the size of a token budget)."""
        return self.tokens.counts([i.text for i in items])

    async def search(
        self,
        tenant: str,
        query: str,
        *,
        mode: Mode = "gaama",
        budget: int | None = None,
        k: int = 20,
        subject: str | None = None,
        conversation: str | None = None,
        params: Mapping[str, object] | None = None,
        as_of: float | None = None,
        budget_unit: BudgetUnit | None = None,
        size: Size | None = None,
    ) -> SearchResult:
        """Retrieve memory for ``query`` from ``tenant``'s graph.

        Args:
            tenant: The tenant (from the API key, never from a request body).
            query: The question or cue.
            mode: ``gaama``, ``semantic`` or ``ppr``.
            budget: Budget of the packed memory in ``budget_unit`` (default
                ``retrieval.budget_words`` or ``retrieval.budget_tokens``).
            k: Length of the ranked list (1..200).
            subject: Only nodes about this subject.
            conversation: Only nodes of this conversation.
            params: Overrides of ``RetrievalSettings`` fields, validated within their bounds.
            as_of: Epoch seconds: the memory as it stood then (nothing said later; what held
                then counts as current). None: now.
            budget_unit: ``words`` or ``tokens`` (default ``retrieval.budget_unit``).
            size: What an item costs of the budget, replacing the unit's own count (the
                context call counts each item's rendered line).

        Returns:
            The packed memory, the top-k ranking, timings and subgraph statistics.

        Raises:
            ValidationError: bad mode, k, budget, query or parameter.
        """
        check_request(mode, k, query)
        p = resolve_params(self.settings.retrieval, params, budget, budget_unit)
        in_tokens = p.budget_unit == "tokens"
        if size is None:
            size = self.token_sizes if in_tokens else word_sizes
        w_ppr = 0.0 if mode == "semantic" else p.w_ppr
        w_sim = 0.0 if mode == "ppr" else p.w_sim
        timings = dict.fromkeys(QUERY_STAGES, 0.0)
        started = clock = time.perf_counter()
        started_ns = time.time_ns()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[stage] = (now - clock) * 1000.0
            clock = now

        qvec = np.asarray((await self.embedder.embed([query]))[0], dtype=np.float32)
        lap("embed")
        # The KNN reply carries each candidate's text, time and place (read by the Query Engine
        # in the same call): no separate read of the pool. The full-text search of the lexical
        # channel runs alongside it.
        knn = self.index.knn(
            tenant,
            qvec,
            pool_size(k, p, mode),
            subject=subject,
            conversation=conversation,
            fields=_SHOWN,
        )
        # A period named in the query is resolved against the scope's latest turn, read
        # alongside the searches (only when the query names one).
        periods = query_periods(query, datetime.now(UTC)) if p.w_time > 0 else []
        latest = self.index.latest_time(tenant, conversation) if periods else _none()
        terms = query_terms(query) if p.w_lex > 0 and p.lexical_k > 0 else []
        if terms:
            lexical = self.index.lexical(
                tenant,
                terms,
                p.lexical_k,
                kinds=LEXICAL_KINDS,
                subject=subject,
                conversation=conversation,
                fields=_SHOWN,
            )
            hits, matches, ref = await asyncio.gather(knn, lexical, latest)
        else:
            hits, ref = await asyncio.gather(knn, latest)
            matches = []
        if ref is not None:
            periods = query_periods(query, datetime.fromtimestamp(ref, UTC))
        lap("knn")
        sims = {h.id: h.similarity for h in hits}
        shown = {h.id: h.fields for h in hits}
        lex = {m.id: m.score for m in matches}
        join_matches(sims, shown, matches, qvec)
        scores: dict[str, float] = {}
        sub: Expansion | None = None
        iterations = 0
        if mode != "semantic" and sims:
            relevance = fuse(sims, lex, p.w_lex, p.fusion) if lex else sims
            seeds = sorted(relevance, key=lambda n: (-relevance[n], n))[: p.seeds]
            # Expanded nodes join the candidates by PPR: an expanded node outside the KNN pool is
            # less similar than every pool node, so only the graph can lift it — the
            # ``expanded_candidates`` with the most PPR mass are scored, the rest cannot compete.
            # They are chosen among the first ``expanded_read`` returnable nodes the expansion
            # admitted outside the candidates held (nearest the most similar seeds, heaviest
            # edges first), whose fields and vectors the expansion's own call reads.
            ahead = ReadAhead(
                fields=_SHOWN,
                dim=int(qvec.size),
                limit=max(p.expanded_read, p.expanded_candidates),
                kinds=RETURNED_KINDS,
                held=sims.keys(),
            )
            sub = await self._expand(tenant, seeds, p, subject, conversation, ahead)
            lap("expand")
            restart = np.zeros(len(sub.nodes))
            restart[: len(seeds)] = [max(relevance[n], 0.0) for n in seeds]
            if not restart.any():  # no seed is similar at all: weigh them equally
                restart[: len(seeds)] = 1.0
            if ppr_size(sub) <= p.ppr_inline_max:
                # A bounded walk runs in this thread: under CPython a worker thread holds the GIL
                # while it computes, so for a short walk it frees nothing for the event loop and
                # only adds two handoffs (``ppr_inline_max`` in the settings).
                result = run_ppr(sub, restart, p)
            else:  # a large walk: off the event loop, in a worker thread
                result = await asyncio.to_thread(run_ppr, sub, restart, p)
            scores = dict(zip(sub.nodes, result.scores.tolist(), strict=True))
            iterations = result.iterations
            read = sorted(
                zip(sub.shown, cosine(sub.vectors, qvec).tolist(), strict=True),
                key=lambda a: -scores[a[0][0]],
            )
            for (node, fields), similarity in read[: p.expanded_candidates]:
                sims[node], shown[node] = similarity, fields
            lap("ppr")
        ppr = {n: v for n, v in scores.items() if n in sims}
        caps = Caps(
            p.cap_facts, p.cap_reflections, p.cap_episodes, budget_of(p), p.reflection_floor
        )
        # Similarity fused with the full-text match over every candidate (expanded ones too).
        relevance = fuse(sims, lex, p.w_lex, p.fusion) if lex else sims
        prior = time_prior(periods, relevance, shown, p.w_time) if periods else {}
        if p.w_person > 0:
            for node, gain in person_prior(query, relevance, shown, p.w_person).items():
                prior[node] = prior.get(node, 0.0) + gain
        items = score_candidates(relevance, ppr, w_ppr, w_sim, keep=(k, caps), prior=prior)
        for item in items:
            show(item, shown.get(item.id, {}), p.compact_text)
        # a node deleted since it was read has no text; a redacted one says nothing
        items = [i for i in items if i.text and not shown.get(i.id, {}).get(REDACTED_AT)]
        items = await self._with_successors(tenant, items, as_of, subject, conversation, p)
        items = prefer_current(items, as_of, p.superseded_weight, p.omit_superseded)
        # Each turn ranked once: a fact and the episode it came from say the same turn.
        ranked = distinct_turns(items, k) if p.rank_distinct else items[:k]
        ranked = current_first(ranked, as_of)
        memory = packed_current_first(pack(items, caps, size), as_of)
        # Provenance only of what is returned: one call for its facts and reflections (an
        # episode's own turn id came with its text).
        returned = {i.id: i for i in [*ranked, *memory]}
        derived = [n for n, i in returned.items() if i.kind is not NodeKind.EPISODE]
        for node, turns in (await self.graph.provenance(tenant, derived)).items():
            returned[node].provenance = [Provenance(e, t) for e, t in turns]
        lap("pack")
        out = SearchResult(
            mode=mode,
            memory=memory,
            ranked=ranked,
            words=count_words(memory),
            timings_ms=timings,
            subgraph_nodes=len(sub.nodes) if sub else 0,
            ppr_iterations=iterations,
            params=p,
            tokens=sum(self.token_sizes(memory)) if in_tokens else None,
        )
        self._observe(out, time.perf_counter() - started)
        # The stages as spans from the same timings the metrics observe.
        tracing.timed(
            "search",
            started_ns,
            timings,
            lambda: {
                "gaama.tenant.digest": tracing.tenant_digest(tenant),
                "gaama.search.mode": mode,
                "gaama.search.k": k,
                "gaama.search.subgraph_nodes": out.subgraph_nodes,
                "gaama.search.ppr_iterations": iterations,
                "gaama.search.memory_items": len(memory),
            },
        )
        return out

    async def _with_successors(
        self,
        tenant: str,
        items: list[Item],
        as_of: float | None,
        subject: str | None,
        conversation: str | None,
        p: RetrievalSettings,
    ) -> list[Item]:
        """``items`` with what ended their superseded ones ranked at least as high, read in
        (within the search's scope) when the search did not find it."""
        found: dict[str, Item] = {}
        have = {i.id for i in items}
        wanted = successors_wanted(items, have, as_of)
        for _ in range(CHAIN_HOPS):
            if not wanted:
                break
            rows = await self.graph.get_fields(tenant, wanted, _SHOWN)
            fresh = []
            for node, row in rows.items():
                kind = node_kind(node)
                fields = {f: as_text(v) for f, v in zip(_SHOWN, row, strict=True) if v is not None}
                if (
                    kind is None
                    or kind not in RETURNED_KINDS
                    or not _in_scope(fields, subject, conversation)
                ):
                    continue
                item = Item(node, kind)
                show(item, fields, p.compact_text)
                if item.text and not fields.get(REDACTED_AT):
                    found[node] = item
                    fresh.append(item)
            have |= set(wanted)
            wanted = successors_wanted(fresh, have, as_of)
        return inherit(items, found, as_of)

    async def _expand(
        self,
        tenant: str,
        seeds: Sequence[str],
        p: RetrievalSettings,
        subject: str | None,
        conversation: str | None,
        read_ahead: ReadAhead,
    ) -> Expansion:
        # One server-side call (GraphStore.expand): hubs are not expanded through — their edges
        # to nodes reached from elsewhere stay, but their hundreds of other neighbours never
        # enter the subgraph. This is hub dampening applied to the walk's reach, and it keeps the
        # subgraph (and latency) bounded however large a tenant's graph and its hubs grow.
        return await self.graph.expand(
            tenant,
            seeds,
            hops=p.hops,
            hub_degree=p.hub_degree,
            max_nodes=max(p.max_expanded, len(seeds)),
            type_weights=EDGE_TYPE_WEIGHTS,
            conversation=conversation,
            subject=subject,
            read_ahead=read_ahead,
        )

    def _observe(self, result: SearchResult, seconds: float) -> None:
        if self.metrics is None:
            return
        self.metrics.seconds.labels(result.mode).observe(seconds)
        for stage, ms in result.timings_ms.items():
            if ms > 0:
                self.metrics.stage_seconds.labels(stage).observe(ms / 1000.0)
        if result.mode != "semantic":
            self.metrics.subgraph_nodes.observe(result.subgraph_nodes)
            self.metrics.ppr_iterations.observe(result.ppr_iterations)


async def _none() -> None:
    return None
