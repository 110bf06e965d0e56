"""MCP gateway handlers: tool argument and result models, and plain async functions that turn a
tool call into REST calls (no MCP transport here).

The gateway consumes and produces no topics: it calls the query service (``/v1/search``,
``/v1/context``, ``/v1/answer``, ``/v1/nodes/{id}``, ``/v1/memories``, forgetting) and the ingest
service (``POST /v1/turns``) with the *caller's* API key, so tenancy, validation, request limits
and forgetting are enforced where they always are. Every failure becomes a :class:`ToolFailure`: a
tool error with a reason (for metrics) and a bounded message naming the problem.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

import httpx
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
)

from gaama import ids
from gaama.client import AsyncGaamaClient, GaamaAPIError
from gaama.config import Settings
from gaama.events import SPEAKER_MAX, parse_time

#: Longest error text a tool returns: a model reads it, a log line carries it.
MESSAGE_MAX = 500
#: What POST /v1/turns and the query service accept by default (the operator may lower them;
#: the API then refuses with a message naming the bound, which the tool passes on).
TEXT_MAX: int = Settings.model_fields["turn_max_chars"].default
QUERY_MAX: int = Settings.model_fields["query_max_chars"].default
#: POST /v1/turns takes at most this many turns per request (services/ingest/handlers.py).
TURNS_MAX = 1000
LIST_MAX = 200

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class ToolFailure(ToolError):
    """A tool call that failed for a known reason; the model reads ``message``."""

    def __init__(self, reason: str, message: str) -> None:
        message = message if len(message) <= MESSAGE_MAX else message[: MESSAGE_MAX - 1] + "…"
        super().__init__(message)
        self.reason = reason
        self.message = message


# --- arguments ----------------------------------------------------------------------------------


# Free text like the API's (strict, no NUL or lone surrogate) of 1..N characters; the bounds come
# before the check so that an error says "at most N characters".
TurnText = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=TEXT_MAX),
    AfterValidator(ids.check_text),
]
QueryText = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=QUERY_MAX),
    AfterValidator(ids.check_text),
]
SpeakerText = Annotated[
    str,
    StringConstraints(strict=True, min_length=1, max_length=SPEAKER_MAX),
    AfterValidator(ids.check_text),
]


def _timestamp(value: str | float) -> str | float:
    parse_time(value)  # the same rule as POST /v1/turns, checked before the round trip
    return value


#: ISO 8601 text or epoch seconds; strict: ``true`` is not a time.
Timestamp = Annotated[StrictStr | StrictInt | StrictFloat, AfterValidator(_timestamp)]


class TurnArg(BaseModel):
    """One turn of ``remember(turns=[...])``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: TurnText = Field(description="What was said.")
    speaker: SpeakerText | None = Field(
        None, description="Who said it; default: the call's `speaker`."
    )
    timestamp: Timestamp | None = Field(
        None, description="When: ISO 8601 or epoch seconds; default: the call's, else now."
    )
    turn_id: ids.TurnId | None = Field(
        None,
        description="Your id for the turn (stable ids make retries harmless); default: derived "
        "from time, speaker and text.",
    )


#: A subject as the API takes it (``user/42``; ``/`` allowed), never empty.
Subject = Annotated[ids.SubjectId, Field(min_length=1)]
Mode = Literal["gaama", "semantic", "ppr"]
BudgetUnit = Literal["words", "tokens"]


class ScopeArg(BaseModel):
    """Which part of the memory a search reads."""

    model_config = ConfigDict(extra="forbid", strict=True)

    conversation: ids.ConversationId | None = Field(
        None, description="Only memory from this conversation."
    )
    subject: Subject | None = Field(
        None, description="Only memory about this subject (as given to remember)."
    )


Kind = Literal["episode", "fact", "reflection", "concept"]


# --- results ------------------------------------------------------------------------------------


class Provenance(BaseModel):
    episode_id: str = Field(description="The stored turn (read it with get_memory).")
    turn_id: str = Field(description="The turn's id in its conversation.")


class MemoryItem(BaseModel):
    id: str
    kind: str = Field(description="episode (a verbatim turn), fact, reflection or concept")
    text: str
    time: float = Field(description="Epoch seconds (when it was said or derived)")
    date: str = Field(description="`time` as ISO 8601, UTC")
    conversation: str
    score: float
    provenance: list[Provenance] = Field(description="The turns this item was derived from")


class RememberResult(BaseModel):
    accepted: int = Field(description="Turns accepted for storage")
    episode_ids: list[str] = Field(description="Their ids, as cited by search provenance")


class SearchResult(BaseModel):
    memory: list[MemoryItem] = Field(description="Packed memory within the budget")
    ranked: list[MemoryItem] = Field(description="The top-k items by score")
    words: int
    tokens: int | None = Field(None, description="The memory's tokens (a token budget)")
    mode: str


class CitedItem(MemoryItem):
    citation: str = Field(description="Its id in the context block, e.g. F1, R1, E1")


class Cited(BaseModel):
    id: str
    kind: str


class ContextResult(BaseModel):
    context: str = Field(description="The prompt-ready block: facts, reflections, turns")
    items: list[CitedItem] = Field(description="The block's items in block order")
    citations: dict[str, Cited] = Field(description="Each citation id's memory id and kind")
    tokens: int = Field(description="The block's tokens (within max_tokens)")
    query: str


class AnswerResult(BaseModel):
    answer: str
    memory: list[MemoryItem] = Field(description="The memory the answer was drawn from")
    words: int
    mode: str


class Neighbour(BaseModel):
    id: str
    kind: str
    edge: str
    direction: Literal["out", "in"]
    weight: float


class ListedMemory(BaseModel):
    id: str
    kind: str
    text: str
    time: float
    date: str
    conversation: str
    subject: str
    turn_id: str
    speaker: str


class MemoryNode(ListedMemory):
    """A listed memory in full: with its belief, sources and neighbours."""

    belief: float
    sources: list[str] = Field(description="Episode ids a fact or reflection came from")
    neighbours: list[Neighbour]
    neighbours_total: int


class ListResult(BaseModel):
    items: list[ListedMemory]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null: last")


class ForgetResult(BaseModel):
    request_id: str
    status: Literal["pending", "done"]
    removed: dict[str, int] = Field(description="What was removed, by kind (when done)")


# --- errors -------------------------------------------------------------------------------------


def _api_failure(exc: GaamaAPIError, what: str) -> ToolFailure:
    status, detail = exc.status_code, ids.preview(exc.message, 300)[1:-1]
    if status in (400, 413, 422):
        return ToolFailure("invalid", f"{what} refused the request (HTTP {status}): {detail}")
    if status in (401, 403):
        return ToolFailure("unauthorized", f"the credential was refused (HTTP {status}): {detail}")
    if status == 404:
        return ToolFailure("not_found", f"not found (HTTP 404): {detail}")
    if status == 429:
        return ToolFailure("throttled", f"too many requests (HTTP 429): {detail}; retry later")
    if status == 503:
        return ToolFailure("unavailable", f"{what} is unavailable (HTTP 503): {detail}")
    return ToolFailure("upstream", f"{what} failed (HTTP {status}): {detail}")


async def call(what: str, request: Awaitable[T]) -> T:
    """Await a REST call of ``what`` (a service), turning every failure into a ToolFailure."""
    try:
        return await request
    except GaamaAPIError as exc:
        raise _api_failure(exc, what) from None
    except httpx.TimeoutException:
        raise ToolFailure("timeout", f"{what} did not answer in time; retry later") from None
    except httpx.HTTPError as exc:  # connection refused, reset, DNS, protocol errors
        reason = ids.preview(str(exc) or type(exc).__name__, 200)[1:-1]
        raise ToolFailure("unavailable", f"cannot reach {what}: {reason}") from None


def _shape(model: type[M], data: Any, what: str) -> M:
    """The API's JSON as ``model``; an answer of another shape is the service's fault."""
    try:
        return model.model_validate(data)
    except ValueError:
        raise ToolFailure("upstream", f"{what} answered in an unexpected shape") from None


# --- rendering ----------------------------------------------------------------------------------


def _date(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return ""


def _item(raw: Any) -> Any:
    if not isinstance(raw, dict):
        return raw  # _shape reports it
    t = raw.get("time")
    return {**raw, "date": _date(t) if isinstance(t, int | float) else ""}


def _line(i: int, item: MemoryItem) -> str:
    turns = ", ".join(p.turn_id for p in item.provenance)
    cite = f"; from turn {turns}" if turns else ""
    return f"{i}. [{item.kind}, {item.date[:10]}] {item.text} (id {item.id}{cite})"


def _result(model: BaseModel, text: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=model.model_dump(mode="json"),
    )


QUERY = "the query service"
INGEST = "the ingest service"


# --- tools --------------------------------------------------------------------------------------


async def remember(
    client: AsyncGaamaClient,
    *,
    conversation: str,
    text: str | None,
    turns: list[TurnArg] | None,
    speaker: str,
    subject: str | None,
    timestamp: str | float | None,
) -> CallToolResult:
    if (text is None) == (turns is None):
        raise ToolFailure(
            "invalid",
            "give either `text` (one turn) or `turns` (several turns in order), not both"
            if text is not None
            else "nothing to remember: give `text` (one turn) or `turns` (several)",
        )
    now = datetime.now(UTC).isoformat()
    given = turns if turns is not None else [TurnArg(text=text or "")]
    body: list[dict[str, Any]] = []
    for t in given:
        turn: dict[str, Any] = {
            "conversation": conversation,
            "speaker": t.speaker or speaker,
            "text": t.text,
            "timestamp": t.timestamp if t.timestamp is not None else (timestamp or now),
        }
        if t.turn_id is not None:
            turn["turn_id"] = t.turn_id
        if subject:
            turn["subject"] = subject
        body.append(turn)
    episode_ids = await call(INGEST, client.add_turns(body))
    out = RememberResult(accepted=len(episode_ids), episode_ids=episode_ids)
    return _result(
        out,
        f"Remembered {out.accepted} turn(s) in conversation {conversation!r}; they become "
        f"searchable within seconds. Episode ids: {', '.join(out.episode_ids)}",
    )


async def search_memory(
    client: AsyncGaamaClient,
    *,
    query: str,
    k: int,
    budget: int | None,
    mode: Mode,
    scope: ScopeArg | None,
    budget_unit: BudgetUnit | None = None,
) -> CallToolResult:
    data = await call(
        QUERY,
        client.search(
            query,
            k=k,
            budget=budget,
            budget_unit=budget_unit,
            mode=mode,
            conversation=scope.conversation if scope else None,
            subject=scope.subject if scope else None,
        ),
    )
    out = _shape(
        SearchResult,
        {
            **data,
            "memory": [_item(i) for i in data.get("memory", [])],
            "ranked": [_item(i) for i in data.get("ranked", [])],
        },
        QUERY,
    )
    if not out.memory:
        return _result(out, f"Nothing in memory matches {ids.preview(query, 100)}.")
    size = f"{out.tokens} tokens" if out.tokens is not None else f"{out.words} words"
    lines = [f"Memory for {ids.preview(query, 100)} ({len(out.memory)} items, {size}):"]
    lines += [_line(i, item) for i, item in enumerate(out.memory, 1)]
    return _result(out, "\n".join(lines))


async def get_context(
    client: AsyncGaamaClient,
    *,
    query: str,
    max_tokens: int,
    scope: ScopeArg | None,
    as_of: float | None,
) -> CallToolResult:
    data = await call(
        QUERY,
        client.get_context(
            query,
            max_tokens=max_tokens,
            conversation=scope.conversation if scope else None,
            subject=scope.subject if scope else None,
            as_of=as_of,
        ),
    )
    out = _shape(ContextResult, {**data, "items": [_item(i) for i in data.get("items", [])]}, QUERY)
    if not out.items:
        return _result(out, f"Nothing in memory matches {ids.preview(query, 100)}.")
    return _result(out, out.context)


async def answer(
    client: AsyncGaamaClient,
    *,
    question: str,
    budget: int | None,
    mode: Mode,
    scope: ScopeArg | None,
) -> CallToolResult:
    try:
        data = await call(
            QUERY,
            client.answer(
                question,
                budget=budget,
                mode=mode,
                conversation=scope.conversation if scope else None,
                subject=scope.subject if scope else None,
            ),
        )
    except ToolFailure as exc:
        if exc.reason == "unavailable" and "LLM" in exc.message:
            raise ToolFailure(
                "unavailable",
                f"{exc.message} — answer is not available on this memory service; use "
                "search_memory and answer from the memory it returns",
            ) from None
        raise
    out = _shape(
        AnswerResult, {**data, "memory": [_item(i) for i in data.get("memory", [])]}, QUERY
    )
    sources = "\n".join(_line(i, item) for i, item in enumerate(out.memory, 1))
    return _result(out, f"{out.answer}\n\nFrom memory:\n{sources}" if sources else out.answer)


async def get_memory(client: AsyncGaamaClient, *, node_id: str) -> CallToolResult:
    data = await call(QUERY, client.node(node_id))
    out = _shape(MemoryNode, _item(data), QUERY)
    near = ", ".join(f"{n.edge} {n.direction} {n.id}" for n in out.neighbours[:20])
    more = f" (+{out.neighbours_total - 20} more)" if out.neighbours_total > 20 else ""
    who = f"{out.speaker}: " if out.speaker else ""
    text = (
        f"[{out.kind}, {out.date}, conversation {out.conversation!r}] {who}{out.text}\n"
        f"id {out.id}; neighbours: {near or 'none'}{more}"
    )
    return _result(out, text)


async def list_memories(
    client: AsyncGaamaClient,
    *,
    conversation: str | None,
    subject: str | None,
    kind: Kind | None,
    cursor: str | None,
    limit: int,
) -> CallToolResult:
    data = await call(
        QUERY,
        client.memories(
            conversation=conversation, subject=subject, kind=kind, cursor=cursor, limit=limit
        ),
    )
    out = _shape(ListResult, {**data, "items": [_item(i) for i in data.get("items", [])]}, QUERY)
    lines = [
        f"{len(out.items)} memories" + (" (more: pass next_cursor)" if out.next_cursor else "")
    ]
    lines += [f"- [{m.kind}, {m.date[:10]}] {m.text} (id {m.id})" for m in out.items]
    return _result(out, "\n".join(lines))


async def forget(
    client: AsyncGaamaClient,
    *,
    conversation: str | None,
    subject: str | None,
    wait_s: float,
    poll_s: float = 0.25,
) -> CallToolResult:
    if (conversation is None) == (subject is None):
        raise ToolFailure(
            "invalid",
            "give exactly one of `conversation` or `subject` to forget"
            if conversation is None
            else "give `conversation` or `subject`, not both (forget them in two calls)",
        )
    what = f"conversation {conversation!r}" if conversation is not None else f"subject {subject!r}"
    start: Callable[[], Awaitable[str]] = (
        (lambda: client.forget_conversation(conversation))
        if conversation is not None
        else (lambda: client.forget_subject(subject or ""))
    )
    request_id = await call(QUERY, start())
    deadline = time.monotonic() + wait_s
    while True:
        status = await call(QUERY, client.forget_status(request_id))
        out = _shape(ForgetResult, {"request_id": request_id, **status}, QUERY)
        if out.status == "done" or time.monotonic() >= deadline:
            break
        await asyncio.sleep(poll_s)
    if out.status == "done":
        removed = ", ".join(f"{n} {k}" for k, n in sorted(out.removed.items())) or "nothing"
        return _result(out, f"Forgot {what}: removed {removed}.")
    return _result(
        out,
        f"Forgetting {what} is under way (request {request_id}): it no longer appears in any "
        "search or list, and its stored data is being removed.",
    )
