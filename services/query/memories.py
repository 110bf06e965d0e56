"""Data subject requests on the query service: forget, list, export, audit (plain handlers).

- ``DELETE /v1/conversations/{id}``, ``/v1/subjects/{id}``, ``/v1/tenant`` (admin) accept a
  forget request: the scope is hidden from every read at once (a marker in Redis), then a
  :class:`~gaama.events.ForgetRequested` is published behind every turn produced before it
  (keyed like the conversation's turns, or to every partition for a subject or the tenant).
  202 ``{"request_id"}``; ``GET /v1/forget/{id}`` follows it.
- ``GET /v1/memories`` lists nodes (stable order: time, then id; opaque cursor);
  ``GET /v1/export?subject=S`` streams JSONL of every node and edge about S with provenance.
- Unknown ids answer like any other: forgetting a conversation nobody wrote answers 202 and ends
  ``done`` with zero counts (the scope may still have turns in flight, so "unknown" cannot be
  decided at the door); another tenant's request id answers 404 like a missing one.

Reads hide what a pending request covers, by provenance
(:func:`~gaama.store.forget.hidden_nodes`).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from gaama import ids
from gaama.errors import BrokerUnavailable, NotFound, ValidationError
from gaama.events import TOPIC_TURNS, ForgetRequested, ForgetScope, describe
from gaama.metrics import ForgetMetrics
from gaama.model import EdgeKind, NodeKind
from gaama.retrieval.pack import Item
from gaama.store.forget import ABANDONED, ForgetStore, Hidden, hidden_nodes
from gaama.store.graph import GraphStore
from gaama.store.validity import VALIDITY_FIELDS, validity_of
from gaama.store.vectors import VectorIndex
from services.runtime.producer import EventProducer

LIST_MAX = 200
LISTABLE = ("episode", "fact", "reflection", "concept")


@dataclass
class ForgetDeps:
    forgets: ForgetStore
    producer: EventProducer
    metrics: ForgetMetrics


class ForgetAccepted(BaseModel):
    request_id: str


class ForgetStatusOut(BaseModel):
    request_id: str
    status: Literal["pending", "done"]
    scope: str
    removed: dict[str, int]
    requested_at: float
    done_at: float | None


class MemoryOut(BaseModel):
    id: str
    kind: str
    text: str
    time: float
    conversation: str
    subject: str
    turn_id: str
    speaker: str
    valid_from: float | None = None
    valid_to: float | None = None
    learned_at: float | None = None
    retired_at: float | None = None
    superseded_by: str | None = None
    superseded_reason: str | None = None


class MemoryPage(BaseModel):
    items: list[MemoryOut]
    next_cursor: str | None


class ListQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    conversation: ids.ConversationId | None = None
    subject: ids.SubjectId | None = None
    kind: Literal["episode", "fact", "reflection", "concept"] | None = None
    cursor: str | None = Field(None, max_length=400)
    limit: int = Field(50, ge=1, le=LIST_MAX)


# --- forget ---------------------------------------------------------------------------------


async def accept_forget(
    deps: ForgetDeps, tenant: str, scope: ForgetScope, scope_id: str, requester: str
) -> ForgetAccepted:
    """Hide the scope, then publish the request on every lane it must travel.

    Raises:
        ValidationError: a malformed scope id.
        BrokerUnavailable: the broker did not take the request (nothing is left behind).
    """
    try:
        probe = ForgetRequested(
            request_id=uuid.uuid4().hex, tenant=tenant, scope=scope, scope_id=scope_id
        )
    except PydanticValidationError as exc:  # a bad id
        deps.metrics.requests.labels(scope, "invalid").inc()
        raise ValidationError(f"{scope}: {describe(exc)}") from None
    try:
        if scope == "conversation":
            lanes: list[int | None] = [None]
        else:
            lanes = list(await deps.producer.partitions(TOPIC_TURNS))
    except BrokerUnavailable:
        deps.metrics.requests.labels(scope, "unavailable").inc()
        raise
    names = ["c"] if scope == "conversation" else [f"p{p}" for p in lanes]
    rid = probe.request_id
    await deps.forgets.accept(
        tenant, rid, scope, scope_id, lanes=names, requester=requester, now=time.time()
    )
    try:
        for p in lanes:
            ev = probe.model_copy(update={"partition": p})
            await deps.producer.send(TOPIC_TURNS, ev.key(), ev, p)
    except BrokerUnavailable:
        # Lanes already sent cannot be taken back: abandon the request, so every stage drops
        # them and changes nothing, and the caller's retry starts clean.
        await deps.forgets.abandon(tenant, rid, scope, scope_id)
        deps.metrics.requests.labels(scope, "unavailable").inc()
        raise
    deps.metrics.requests.labels(scope, "accepted").inc()
    return ForgetAccepted(request_id=rid)


async def forget_status(deps: ForgetDeps, tenant: str, request_id: str) -> ForgetStatusOut:
    st = await deps.forgets.status(tenant, request_id) if len(request_id) == 32 else None
    if st is None or st.status == ABANDONED:  # refused: as if it had never been asked
        raise NotFound(f"forget request {ids.preview(request_id)} not found")
    return ForgetStatusOut(
        request_id=st.request_id,
        status="done" if st.status == "done" else "pending",
        scope=st.scope,
        removed=st.removed,
        requested_at=st.requested_at,
        done_at=st.done_at,
    )


# --- what reads may show ----------------------------------------------------------------------


async def visible(
    graph: GraphStore, tenant: str, hidden: Hidden, items: Sequence[Item]
) -> list[Item]:
    """``items`` minus what a pending forget hides (:func:`~gaama.store.forget.hidden_nodes`:
    by provenance, the items' own where they carry it)."""
    if not hidden or not items:
        return list(items)
    known = {i.id: [p.episode_id for p in i.provenance] for i in items if i.provenance}
    gone = await hidden_nodes(graph, tenant, hidden, [i.id for i in items], known)
    return [i for i in items if i.id not in gone]


# --- list -------------------------------------------------------------------------------------


def _cursor(time_: float, node_id: str) -> str:
    raw = json.dumps([time_, node_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _uncursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        t, node = json.loads(raw)
        return float(t), str(node)
    except (ValueError, TypeError) as exc:
        raise ValidationError(f"cursor: not a cursor this service issued ({exc})") from None


async def list_memories(
    index: VectorIndex, graph: GraphStore, hidden: Hidden, tenant: str, q: ListQuery
) -> MemoryPage:
    """One page of the tenant's nodes in (time, id) order, after ``q.cursor``.

    The index sorts by time only, so a page never ends inside a group of equal times that was
    read in part: such a group is read whole (facts of one chunk share a time)."""
    after = _uncursor(q.cursor) if q.cursor else None
    kinds = [NodeKind(q.kind)] if q.kind else [NodeKind(k) for k in LISTABLE]
    fields = ("text", "conversation", "subject", "turn_id", "speaker", *VALIDITY_FIELDS)

    async def scan(**kw: Any) -> list[tuple[float, str, NodeKind, dict[str, str]]]:
        rows = await index.scan(
            tenant, kinds=kinds, conversation=q.conversation, subject=q.subject, fields=fields, **kw
        )
        return sorted(((float(f.get("time") or 0), n, k, f) for n, k, f in rows), key=_order)

    rows: list[tuple[float, str, NodeKind, dict[str, str]]] = []
    if after is not None:
        ties = await scan(time_min=after[0], time_max=after[0], limit=None)
        rows = [r for r in ties if (r[0], r[1]) > after]
    batch = q.limit + 1
    more = False
    if len(rows) <= q.limit:
        start = after[0] if after is not None else None
        later = await scan(time_min=start, min_exclusive=after is not None, limit=batch)
        if len(later) == batch:  # the last time group may be cut: read it whole instead
            edge = later[-1][0]
            head = [r for r in later if r[0] < edge]
            later = head or await scan(time_min=edge, time_max=edge, limit=None)
            more = True
        rows += later
    more = more or len(rows) > q.limit
    page = rows[: q.limit]
    gone = await hidden_nodes(graph, tenant, hidden, [n for _, n, _, _ in page])
    items = [
        MemoryOut(
            id=n,
            kind=k.value,
            text=f.get("text", ""),
            time=t,
            conversation=f.get("conversation", ""),
            subject=f.get("subject", ""),
            turn_id=f.get("turn_id", ""),
            speaker=f.get("speaker", ""),
            **validity_of(f).as_dict(),
        )
        for t, n, k, f in page
        if n not in gone
    ]
    last = page[-1] if page else None
    return MemoryPage(
        items=items, next_cursor=_cursor(last[0], last[1]) if (last and more) else None
    )


def _order(row: tuple[float, str, NodeKind, dict[str, str]]) -> tuple[float, str]:
    return row[0], row[1]


# --- export -----------------------------------------------------------------------------------


async def export_subject(
    index: VectorIndex,
    graph: GraphStore,
    hidden: Hidden,
    tenant: str,
    subject: str,
    conversation: str | None = None,
) -> AsyncIterator[bytes]:
    """JSONL of every node and edge about ``subject`` (within ``conversation`` when given): its
    episodes, the facts derived from them (with their source episodes), reflections citing
    those facts, and their concepts."""
    if hidden.covers("", subject):
        return
    found = [
        node
        for node, _, _ in await index.scan(
            tenant,
            kinds=[NodeKind.EPISODE],
            subject=subject,
            conversation=conversation,
            limit=None,
            fields=("conversation",),
        )
    ]
    gone = await hidden_nodes(graph, tenant, hidden, found)
    episodes = [e for e in found if e not in gone]
    seen: set[str] = set()  # read
    shown: set[str] = set()  # written (not hidden by a pending forget)
    edges: set[tuple[str, str, str]] = set()
    frontier = list(episodes)
    follow = {
        NodeKind.EPISODE: (EdgeKind.DERIVED_FROM, EdgeKind.HAS_CONCEPT),
        NodeKind.FACT: (EdgeKind.DERIVED_FROM_FACT, EdgeKind.ABOUT_CONCEPT, EdgeKind.SUPERSEDES),
    }
    while frontier:
        batch = [n for n in dict.fromkeys(frontier) if n not in seen]
        frontier = []
        if not batch:
            break
        seen.update(batch)
        nodes = await graph.get_nodes(tenant, batch)
        gone = await hidden_nodes(graph, tenant, hidden, list(nodes))
        nodes = {n: node for n, node in nodes.items() if n not in gone}
        shown.update(nodes)
        adjacency = await graph.neighbours(tenant, list(nodes))
        for node_id, node in nodes.items():
            line: dict[str, Any] = {
                "type": "node",
                "id": node_id,
                "kind": node.kind.value,
                "text": node.text,
                "time": node.time,
                "conversation": node.conversation,
                "subject": node.subject,
                "turn_id": node.turn_id,
                "speaker": node.speaker,
            }
            if sources := node.extra.get("sources"):
                line["sources"] = sources.split(",")
            if node.kind is NodeKind.FACT:
                line.update(validity_of(node.extra).as_dict())
            yield (json.dumps(line, ensure_ascii=False) + "\n").encode()
            for nb in adjacency.get(node_id, []):
                if nb.kind in follow.get(node.kind, ()):
                    src, dst = (node_id, nb.node) if nb.outgoing else (nb.node, node_id)
                    edges.add((src, dst, nb.kind.value))
                    frontier.append(nb.node)
    for src, dst, kind in sorted(edges):
        if src in shown and dst in shown:
            line = {"type": "edge", "src": src, "dst": dst, "kind": kind}
            yield (json.dumps(line) + "\n").encode()
