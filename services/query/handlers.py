"""Query service handlers: request/response models and plain async functions (no HTTP here).

The query service is stateless and consumes no topics: it reads the graph and the vector index
in Redis. The tenant always comes from the caller's API key (see ``app.py``); request models
forbid unknown fields, so a ``tenant`` in a body is rejected rather than ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import to_json

from gaama import ids
from gaama.config import Settings
from gaama.errors import NotFound, PermanentError, ValidationError
from gaama.ids import kind_of
from gaama.metrics import QueryMetrics
from gaama.model import Node, NodeKind
from gaama.retrieval.context import Message, build_context, header_tokens, line_sizes, query_of
from gaama.retrieval.limits import bounds, check_request
from gaama.retrieval.pack import Item, Size
from gaama.retrieval.search import BUDGET_MAX, BUDGET_MIN, K_MAX, Retriever, SearchResult
from gaama.store.forget import ForgetStore, Hidden, hidden_nodes
from gaama.store.graph import GraphStore
from gaama.store.validity import validity_of
from gaama.store.vectors import VectorIndex
from services.query.memories import ForgetDeps, MemoryOut, visible
from services.runtime.auth import Caller
from services.runtime.readiness import redis_state

log = logging.getLogger("gaama.query")

#: A node listing stops here; hubs can have thousands of neighbours.
MAX_NEIGHBOURS = 1000
#: Messages one context request may carry (only the last user ones make the query).
MESSAGES_MAX = 200


class Unavailable(PermanentError):
    """A feature that is not available in this deployment (HTTP 503)."""

    reason = "unavailable"
    http_status = 503


class Answerer(Protocol):
    async def answer(self, question: str, memory_text: str) -> str: ...


# --- request models ---------------------------------------------------------------------------


class Scope(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    subject: ids.SubjectId | None = None
    conversation: ids.ConversationId | None = None

    @field_validator("subject")
    @classmethod
    def _subject(cls, v: str | None) -> str | None:
        if v == "":
            raise ValueError("must not be empty (leave it out to search every subject)")
        return v


class _Retrieval(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    scope: Scope | None = None
    mode: Literal["gaama", "semantic", "ppr"] = "gaama"
    budget: int | None = Field(
        None, ge=BUDGET_MIN, le=BUDGET_MAX, description="Budget of the packed memory"
    )
    budget_unit: Literal["words", "tokens"] | None = Field(
        None,
        description="What the budget counts: whitespace words or the embedder's tokens "
        "(default: the service's GAAMA_RETRIEVAL__BUDGET_UNIT, words unless set)",
    )
    params: dict[str, float] | None = Field(
        None,
        max_length=32,
        description="Overrides of retrieval settings (alpha, w_ppr, w_sim, seeds, ...), "
        "within the operator's limits (GAAMA_LIMITS__*)",
    )


class SearchRequest(_Retrieval):
    query: ids.Text = Field(min_length=1)
    as_of: float | None = Field(
        None, ge=0, description="Epoch seconds: the memory as it stood then (default: now)"
    )
    k: int = Field(20, ge=1, le=K_MAX, description="Length of the ranked list")


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["user", "assistant", "system", "tool"]
    content: ids.Text


class ContextRequest(BaseModel):
    """A query, or the chat whose last user message(s) make the query."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: ids.Text | None = Field(None, min_length=1)
    messages: list[MessageIn] | None = Field(None, min_length=1, max_length=MESSAGES_MAX)
    scope: Scope | None = None
    as_of: float | None = Field(
        None, ge=0, description="Epoch seconds: the memory as it stood then (default: now)"
    )
    max_tokens: int = Field(
        1000, ge=BUDGET_MIN, le=BUDGET_MAX, description="Token budget of the whole block"
    )
    mode: Literal["gaama", "semantic", "ppr"] = "gaama"
    params: dict[str, float] | None = Field(None, max_length=32)

    @model_validator(mode="after")
    def _one_query(self) -> ContextRequest:
        if (self.query is None) == (self.messages is None):
            raise ValueError("give either query or messages (the query is built from them)")
        return self


class AnswerRequest(_Retrieval):
    question: ids.Text = Field(min_length=1)
    as_of: float | None = Field(
        None, ge=0, description="Epoch seconds: the memory as it stood then (default: now)"
    )


R = TypeVar("R", bound=_Retrieval | ContextRequest)


def within(req: R, who: Caller) -> R:
    """``req`` with its scope bounded to what ``who`` may read: unchanged for a tenant key; a
    token's subject (and conversation, if bound) for a token.

    Raises:
        Forbidden: the request's scope names another subject or conversation than the token's.
    """
    if who.token is None:
        return req
    given = req.scope or Scope()
    subject, conversation = who.scope(given.subject, given.conversation)
    bounded = req.model_copy(update={"scope": Scope(subject=subject, conversation=conversation)})
    return cast(R, bounded)


# --- response models --------------------------------------------------------------------------


class ProvenanceOut(BaseModel):
    episode_id: str
    turn_id: str


class ItemOut(BaseModel):
    id: str
    kind: str
    text: str
    time: float
    conversation: str
    sim: float
    ppr: float
    score: float
    provenance: list[ProvenanceOut]
    valid_from: float | None = None
    valid_to: float | None = None
    learned_at: float | None = None
    retired_at: float | None = None
    superseded_by: str | None = None
    superseded_reason: str | None = None


class Stats(BaseModel):
    timings_ms: dict[str, float]
    subgraph_nodes: int
    ppr_iterations: int


class SearchResponse(BaseModel):
    memory: list[ItemOut]
    ranked: list[ItemOut]
    words: int
    tokens: int | None = Field(description="The memory's tokens, when the budget is in tokens")
    budget_unit: Literal["words", "tokens"]
    mode: str
    stats: Stats


class ContextItemOut(ItemOut):
    citation: str
    speaker: str = ""


class CitationOut(BaseModel):
    id: str
    kind: str


class ContextResponse(BaseModel):
    context: str
    items: list[ContextItemOut]
    citations: dict[str, CitationOut]
    tokens: int
    query: str


class AnswerResponse(BaseModel):
    answer: str
    memory: list[ItemOut]
    words: int
    tokens: int | None
    budget_unit: Literal["words", "tokens"]
    mode: str
    stats: Stats


class NeighbourOut(BaseModel):
    id: str
    kind: str
    edge: str
    direction: Literal["out", "in"]
    weight: float


class NodeResponse(MemoryOut):
    belief: float
    sources: list[str]
    neighbours: list[NeighbourOut]
    neighbours_total: int


# --- dependencies -----------------------------------------------------------------------------


@dataclass
class QueryDeps:
    """What the handlers need; built once in ``main.py`` (or by a test)."""

    settings: Settings
    graph: GraphStore
    index: VectorIndex
    retriever: Retriever
    metrics: QueryMetrics
    #: Builds the answerer on first use, so the LLM module is imported only when needed.
    answerer_factory: Callable[[], Answerer] | None = None
    #: Forget requests (hide markers, status) and the producer that publishes them; reads hide
    #: pending scopes whenever ``forgets`` is set.
    forgets: ForgetStore | None = None
    forget: ForgetDeps | None = None
    _answerer: Answerer | None = field(default=None, init=False)

    async def hidden(self, tenant: str) -> Hidden:
        return await self.forgets.hidden(tenant) if self.forgets is not None else Hidden()

    def answerer(self) -> Answerer:
        if not self.settings.llm_enabled:
            raise Unavailable(
                "answering needs an LLM and none is configured: set GAAMA_LLM_BASE_URL and "
                "GAAMA_LLM_MODEL (or GAAMA_LLM_CASSETTE_MODE=replay)"
            )
        if self._answerer is None:
            if self.answerer_factory is None:
                raise Unavailable("no LLM answerer is wired into this query service")
            self._answerer = self.answerer_factory()
        return self._answerer


# --- handlers ---------------------------------------------------------------------------------


def _item(i: Item) -> dict[str, object]:
    """An item as :class:`ItemOut` lays it out, as plain data: a search returns up to a few
    hundred of them, and building and then re-validating a model per item and per provenance
    entry cost more than the rest of the response (the route serialises the whole answer once,
    see :func:`search_json`)."""
    return {
        "id": i.id,
        "kind": _KIND_LABELS[i.kind],
        "text": i.text,
        "time": i.time,
        "conversation": i.conversation,
        "sim": round(i.sim, 6),
        "ppr": round(i.ppr, 6),
        "score": round(i.score, 6),
        "provenance": [{"episode_id": p.episode_id, "turn_id": p.turn_id} for p in i.provenance],
        **i.validity.as_dict(),
    }


#: A kind's label; an enum member's ``.value`` is a descriptor call, once per item.
_KIND_LABELS = {k: k.value for k in NodeKind}


def _stats(r: SearchResult) -> dict[str, object]:
    return {
        "timings_ms": {k: round(v, 3) for k, v in r.timings_ms.items()},
        "subgraph_nodes": r.subgraph_nodes,
        "ppr_iterations": r.ppr_iterations,
    }


async def _retrieve(
    req: _Retrieval | ContextRequest,
    query: str,
    k: int,
    tenant: str,
    deps: QueryDeps,
    *,
    budget: int | None = None,
    budget_unit: Literal["words", "tokens"] | None = None,
    size: Size | None = None,
) -> SearchResult:
    s = deps.settings
    if isinstance(req, _Retrieval):
        budget, budget_unit = req.budget, req.budget_unit
    limit = s.query_max_chars
    if len(query) > limit:
        raise ValidationError(
            f"the query has {len(query)} characters; at most {limit} allowed "
            f"(GAAMA_QUERY_MAX_CHARS)"
        )
    check_request(
        s.limits, s.retrieval, k=k, budget=budget, params=req.params, budget_unit=budget_unit
    )
    scope = req.scope
    # What a pending forget hides is read beside the search, not after it: one round trip
    # fewer in a row. A forget accepted before this request began is seen either way.
    hiding = asyncio.ensure_future(deps.hidden(tenant))
    try:
        result = await deps.retriever.search(
            tenant,
            query,
            mode=req.mode,
            budget=budget,
            k=k,
            subject=scope.subject if scope else None,
            conversation=scope.conversation if scope else None,
            params=req.params,
            as_of=getattr(req, "as_of", None),
            budget_unit=budget_unit,
            size=size,
        )
    except BaseException:
        hiding.cancel()
        await asyncio.gather(hiding, return_exceptions=True)  # its outcome is not wanted now
        raise
    hidden = await hiding
    if hidden:
        result.memory = await visible(deps.graph, tenant, hidden, result.memory)
        result.ranked = await visible(deps.graph, tenant, hidden, result.ranked)
    return result


def _packed(r: SearchResult) -> dict[str, object]:
    """What search and answer both return: the packed memory and how it was made."""
    return {
        "memory": [_item(i) for i in r.memory],
        "words": r.words,
        "tokens": r.tokens,
        "budget_unit": r.params.budget_unit,
        "mode": r.mode,
        "stats": _stats(r),
    }


async def handle_search(req: SearchRequest, tenant: str, deps: QueryDeps) -> bytes:
    """Packed memory and the top-k ranking for ``req.query`` in ``tenant``'s graph: a
    :class:`SearchResponse` as JSON."""
    r = await _retrieve(req, req.query, req.k, tenant, deps)
    return search_json(r)


def search_json(r: SearchResult) -> bytes:
    """``r`` as the JSON of a :class:`SearchResponse`."""
    memory = [_item(i) for i in r.memory]
    # The ranked items are mostly packed too (the same objects): each is laid out once.
    laid_out = {id(i): out for i, out in zip(r.memory, memory, strict=True)}
    ranked = [laid_out.get(id(i)) or _item(i) for i in r.ranked]
    return to_json(
        {
            "memory": memory,
            "ranked": ranked,
            "words": r.words,
            "tokens": r.tokens,
            "budget_unit": r.params.budget_unit,
            "mode": r.mode,
            "stats": _stats(r),
        }
    )


async def handle_context(req: ContextRequest, tenant: str, deps: QueryDeps) -> bytes:
    """A prompt-ready block of ``tenant``'s memory for a query or a chat, within
    ``req.max_tokens`` tokens: a :class:`ContextResponse` as JSON."""
    s = deps.settings
    cap = bounds(s.limits, s.retrieval)["budget_tokens"]
    if req.max_tokens > cap:
        raise ValidationError(
            f"max_tokens = {req.max_tokens} is above this service's limit of {cap} "
            f"(GAAMA_LIMITS__BUDGET_TOKENS)"
        )
    limit = s.query_max_chars
    if req.messages is not None:
        query = query_of([Message(m.role, m.content) for m in req.messages], limit)
    else:
        query = req.query or ""
    counter = deps.retriever.tokens
    # Packing spends what the section headers leave; build_context holds the whole block to
    # the budget.
    budget = max(BUDGET_MIN, req.max_tokens - header_tokens(counter))
    r = await _retrieve(
        req,
        query,
        1,
        tenant,
        deps,
        budget=budget,
        budget_unit="tokens",
        size=line_sizes(counter, req.as_of),
    )
    ctx = build_context(r.memory, req.max_tokens, counter, req.as_of)
    items = [{**_item(i), "citation": cid, "speaker": i.speaker} for cid, i in ctx.items]
    citations = {
        cid: {"id": c.id, "kind": _KIND_LABELS[c.kind]} for cid, c in ctx.citations.items()
    }
    return to_json(
        {
            "context": ctx.text,
            "items": items,
            "citations": citations,
            "tokens": ctx.tokens,
            "query": query,
        }
    )


async def handle_answer(req: AnswerRequest, tenant: str, deps: QueryDeps) -> bytes:
    """An LLM answer to ``req.question`` from the packed memory: an :class:`AnswerResponse`
    as JSON.

    Raises:
        Unavailable: no LLM is configured.
    """
    answerer = deps.answerer()  # before retrieval: fail fast when there is no LLM
    r = await _retrieve(req, req.question, 1, tenant, deps)
    text = await answerer.answer(req.question, r.memory_text)
    return to_json({"answer": text, **_packed(r)})


async def handle_node(
    node_id: str, tenant: str, deps: QueryDeps, who: Caller | None = None
) -> NodeResponse:
    """One node of ``tenant`` with its neighbours; for a token (``who``), only a node in its
    scope, with only the neighbours in its scope.

    Raises:
        NotFound: no such node *for this caller* (another tenant's id, or a node outside the
            token's scope, answers the same).
    """
    nodes = await deps.graph.get_nodes(tenant, [node_id]) if len(node_id) <= 200 else {}
    node = nodes.get(node_id)
    if node is not None and who is not None and not who.covers(node.subject, node.conversation):
        node = None
    hidden = await deps.hidden(tenant) if node is not None else None
    if hidden and await hidden_nodes(deps.graph, tenant, hidden, [node_id]):
        node = None  # a pending forget covers it: as if it were gone already
    if node is None:
        raise NotFound(f"node {ids.preview(node_id)} not found")
    adjacency = (await deps.graph.neighbours(tenant, [node_id])).get(node_id, [])
    if who is not None and who.token is not None and adjacency:
        scopes = await _own_scopes(deps.graph, tenant, [n.node for n in adjacency])
        adjacency = [n for n in adjacency if who.covers(*scopes.get(n.node, ("", "")))]
    adjacency.sort(key=lambda n: (n.kind.value, n.node))
    neighbours = [
        NeighbourOut(
            id=n.node,
            kind=_kind_label(n.node),
            edge=n.kind.value,
            direction="out" if n.outgoing else "in",
            weight=n.weight,
        )
        for n in adjacency[:MAX_NEIGHBOURS]
    ]
    return NodeResponse(
        id=node.id,
        kind=node.kind.value,
        text=node.text,
        time=node.time,
        conversation=node.conversation,
        subject=node.subject,
        turn_id=node.turn_id,
        speaker=node.speaker,
        belief=node.belief,
        sources=_sources(node),
        neighbours=neighbours,
        neighbours_total=len(adjacency),
        **validity_of(node.extra).as_dict(),
    )


async def _own_scopes(
    graph: GraphStore, tenant: str, node_ids: list[str]
) -> dict[str, tuple[str, str]]:
    """Each node's own (subject, conversation)."""
    rows = await graph.get_fields(tenant, node_ids, ["subject", "conversation"])
    return {
        n: ((r[0] or b"").decode("utf-8", "replace"), (r[1] or b"").decode("utf-8", "replace"))
        for n, r in rows.items()
    }


def _sources(node: Node) -> list[str]:
    """The episode ids a fact or reflection was derived from."""
    return [s for s in node.extra.get("sources", "").split(",") if s]


def _kind_label(node_id: str) -> str:
    try:
        return kind_of(node_id).value
    except ValueError:
        return "unknown"


async def redis_health(deps: QueryDeps) -> str | None:
    """None when Redis answers and the vector index exists, else the reason (read-only: the
    index keeper recreates a missing index)."""
    return await redis_state(deps.graph.redis, deps.index)
