"""MCP wiring: the tools on an ``MCPServer`` (official SDK), per-tool metrics, and the streamable
HTTP app (``/mcp`` behind the API-key gate, ``/metrics``, ``/healthz``, ``/readyz``).

The gateway consumes and produces no topics. Each tool call becomes REST calls made with the
caller's credential: over stdio the key given at start-up (``GAAMA_API_KEY``), over HTTP the key
of the request (``Authorization: Bearer`` or ``X-API-Key``), forwarded as is. The credential may
be an end-user token (``gaama token mint``): the REST API then bounds every call to the token's
subject, conversation and permissions, so an agent serving one end user reaches that user's
memory alone. The tenant is never an argument: the REST API derives it from the credential.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Annotated, Any

import httpx
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import Field, StrictInt
from pydantic import ValidationError as PydanticValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gaama import ids, tracing
from gaama.client import AsyncGaamaClient
from gaama.config import Settings
from gaama.events import describe
from gaama.metrics import McpMetrics, key_reload_metric, loop_metrics
from gaama.retrieval.search import BUDGET_MAX, BUDGET_MIN, K_MAX
from services.mcp import handlers as h
from services.mcp.settings import McpSettings
from services.runtime.auth import Authenticator, AuthError, api_key_from_headers
from services.runtime.http import ReadyCheck, health_body, metrics_refused
from services.runtime.loop_monitor import LoopMonitor
from services.runtime.tracing import TraceRequests, carrier

log = logging.getLogger("gaama.mcp")

TOOLS = (
    "remember",
    "search_memory",
    "get_context",
    "answer",
    "get_memory",
    "list_memories",
    "forget",
)
MCP_PATH = "/mcp"
READY_TIMEOUT_S = 1.5

INSTRUCTIONS = """\
GAAMA is long-term memory for this user: it keeps every remembered conversation turn verbatim \
and derives facts, concepts and reflections from them, each citing the turns it came from. \
Call search_memory before answering anything that may depend on earlier conversations, the \
user's preferences, plans or facts about people. Call remember for what was said that is worth \
recalling later. Memory belongs to the API key's owner only. Remembered turns are processed in \
the background and become searchable within seconds."""


# --- the gateway's dependencies -------------------------------------------------------------------


class _Lent(httpx.AsyncBaseTransport):
    """The gateway's connection pool lent to one call's client: closing that client leaves the
    pool open (the gateway closes it at shutdown), so a client per key costs no connection."""

    def __init__(self, pool: httpx.AsyncBaseTransport) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # The REST call joins the tool call's trace (W3C traceparent/tracestate).
        for name, value in carrier():
            request.headers[name] = value.decode("latin-1")
        return await self._pool.handle_async_request(request)

    async def aclose(self) -> None:
        return None


@dataclass
class Gateway:
    """What the tools need; built once in ``main.py`` (or by a test).

    Args:
        settings: Where the REST API is, timeouts.
        metrics: Per-tool metrics.
        fixed_key: The stdio user's key; ``None`` over HTTP, where each request brings its own.
        pool: The connection pool every call's client borrows (default: one owned here).
    """

    settings: McpSettings
    metrics: McpMetrics
    fixed_key: str | None = None
    pool: httpx.AsyncBaseTransport = field(
        default_factory=lambda: httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=200))
    )

    def client(self, headers: Mapping[str, str] | None) -> AsyncGaamaClient:
        """A client acting with the caller's key: the stdio key, else the request's."""
        key = self.fixed_key or (api_key_from_headers(headers) if headers else None)
        if not key:
            raise h.ToolFailure(
                "unauthorized",
                "no API key: send 'Authorization: Bearer <key>' or 'X-API-Key' with the request",
            )
        s = self.settings
        return AsyncGaamaClient(
            s.query_url,
            key,
            ingest_url=s.ingest_url,
            timeout=s.mcp_timeout_s,
            transport=_Lent(self.pool),
        )

    async def upstream(self, name: str, url: str) -> str | None:
        """None when the service at ``url`` answers its ``/healthz`` with 200, else the
        reason (its own page says which of its dependencies is down)."""
        async with httpx.AsyncClient(transport=_Lent(self.pool), timeout=READY_TIMEOUT_S) as c:
            try:
                resp = await c.get(f"{url}/healthz")
            except httpx.HTTPError as exc:
                return f"{name} service unreachable at {url}: {exc or type(exc).__name__}"
        if resp.status_code != 200:
            return f"{name} service unhealthy (HTTP {resp.status_code})"
        try:
            status = resp.json().get("status")
        except ValueError:
            status = None
        return None if status == "ok" else f"{name} service {status or 'unhealthy'}"

    def dependencies(self) -> dict[str, ReadyCheck]:
        """The read-only checks ``/healthz`` shows: the query and ingest services."""
        s = self.settings
        return {
            "query": lambda: self.upstream("query", s.query_url),
            "ingest": lambda: self.upstream("ingest", s.ingest_url),
        }

    async def aclose(self) -> None:
        await self.pool.aclose()


# --- per-call bookkeeping -----------------------------------------------------------------------


@dataclass
class _Outcome:
    reason: str | None = None


#: The current tool call's outcome; the tool records why it failed, the middleware counts it.
#: Holding a mutable object means a reason set in a task the call spawned is still seen.
_OUTCOME: ContextVar[_Outcome | None] = ContextVar("gaama_mcp_outcome", default=None)


async def _run(
    gw: Gateway, ctx: Context, work: Callable[[AsyncGaamaClient], Awaitable[CallToolResult]]
) -> CallToolResult:
    try:
        async with gw.client(ctx.headers) as client:
            return await work(client)
    except h.ToolFailure as exc:
        outcome = _OUTCOME.get()
        if outcome is not None:
            outcome.reason = exc.reason
        raise


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


class ToolCalls:
    """Server middleware around every ``tools/call``: refuses unknown tools and arguments with
    a message naming them (the SDK would ignore an unknown argument; a ``tenant`` must never
    look accepted), validates arguments once to say plainly what is wrong, and counts calls,
    errors by reason and latency per tool."""

    def __init__(self, tools: Mapping[str, Tool], metrics: McpMetrics) -> None:
        self.tools = tools
        self.metrics = metrics

    def _problem(self, name: object, args: object) -> tuple[str, str] | None:
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return "unknown_tool", (
                f"unknown tool {ids.preview(name)}; the tools are {', '.join(self.tools)}"
            )
        if not isinstance(args, dict):
            return "invalid", f"{name}: arguments must be an object"
        known = set(tool.parameters.get("properties", {}))
        extra = sorted(str(a) for a in args if a not in known)
        if extra:
            hint = (
                " (the tenant comes from the API key, never from arguments)"
                if "tenant" in extra
                else ""
            )
            names = ", ".join(ids.preview(a, 40) for a in extra[:5])
            return "invalid", (
                f"{name}: unknown argument(s) {names}{hint}; it takes {', '.join(sorted(known))}"
            )
        try:
            tool.fn_metadata.validate_arguments(args)
        except PydanticValidationError as exc:
            return "invalid", f"{name}: invalid arguments: {describe(exc)}"
        return None

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params or {}
        name, args = params.get("name"), params.get("arguments") or {}
        label = name if isinstance(name, str) and name in self.tools else "unknown"
        m = self.metrics
        m.calls.labels(label).inc()
        outcome = _Outcome()
        token = _OUTCOME.set(outcome)
        start = time.perf_counter()
        try:
            problem = self._problem(name, args)
            if problem is not None:
                outcome.reason, message = problem
                return _error(h.ToolFailure(outcome.reason, message).message)
            with tracing.span(
                f"execute_tool {label}",
                lambda: {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": label},
            ):
                result = await call_next(ctx)
            failed = (
                result.get("isError")
                if isinstance(result, dict)
                else getattr(result, "is_error", False)
            )
            if failed and outcome.reason is None:
                outcome.reason = "internal"  # the SDK logged the traceback
            return result
        finally:
            _OUTCOME.reset(token)
            m.seconds.labels(label).observe(time.perf_counter() - start)
            if outcome.reason is not None:
                m.errors.labels(label, outcome.reason).inc()


# --- tool argument types (module level: the SDK resolves the annotations here) ----------------

Conversation = Annotated[
    ids.ConversationId,
    Field(description="Conversation (thread) id, e.g. a chat's id; 1-200 characters, no '/'."),
]
TurnText = h.TurnText
Query = h.QueryText
K = Annotated[StrictInt, Field(ge=1, le=K_MAX)]
Budget = Annotated[StrictInt, Field(ge=BUDGET_MIN, le=BUDGET_MAX)]
Limit = Annotated[StrictInt, Field(ge=1, le=h.LIST_MAX)]
NodeId = Annotated[
    str, Field(strict=True, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")
]
Cursor = Annotated[str, Field(strict=True, min_length=1, max_length=1000)]
Speaker = h.SpeakerText

SCOPE = (
    "Narrow the search: {conversation} to one conversation, {subject} to what is about one "
    "subject, both to their intersection. Leave it out to search all of your memory."
)
MODE = (
    "gaama (default, best): vector similarity plus a walk of the memory graph; semantic: "
    "similarity only; ppr: the graph walk only."
)
BUDGET = "Words of memory to return (default 1000; the service may cap it lower)."
SEARCH_BUDGET = (
    "Words (with budget_unit tokens: tokens) of memory to return (default 1000; the service "
    "may cap it lower)."
)
MaxTokens = Annotated[StrictInt, Field(ge=BUDGET_MIN, le=BUDGET_MAX)]
AsOf = Annotated[float, Field(strict=False, ge=0)]
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)


def build_server(gw: Gateway) -> MCPServer:
    """The MCP server with GAAMA's tools, acting through ``gw``."""

    async def remember(
        ctx: Context,
        conversation: Conversation,
        text: Annotated[
            TurnText | None, Field(description="One turn's text. Give this or `turns`.")
        ] = None,
        turns: Annotated[
            list[h.TurnArg] | None,
            Field(
                min_length=1,
                max_length=h.TURNS_MAX,
                description="Several turns in the order they were said. Give this or `text`.",
            ),
        ] = None,
        speaker: Annotated[
            Speaker, Field(description="Who said it (the default for each of `turns`).")
        ] = "user",
        subject: Annotated[
            h.Subject | None,
            Field(
                description="Who or what this is about, e.g. 'user/42' or 'project-x'; "
                "searches can then be scoped to it."
            ),
        ] = None,
        timestamp: Annotated[
            h.Timestamp | None,
            Field(description="When it was said: ISO 8601 or epoch seconds; default: now."),
        ] = None,
    ) -> Annotated[CallToolResult, h.RememberResult]:
        """Store conversation turns in long-term memory, verbatim.

        Use it for what is worth recalling in a later conversation: facts about the user or
        other people, preferences, plans, decisions, events and their dates. Keep one
        `conversation` id per chat or thread, stable across calls. Turns are processed in the
        background: searchable within seconds; facts and reflections are derived from them
        later. Returns how many turns were accepted and their episode ids (the ids search
        results cite as provenance).
        """
        return await _run(
            gw,
            ctx,
            lambda c: h.remember(
                c,
                conversation=conversation,
                text=text,
                turns=turns,
                speaker=speaker,
                subject=subject,
                timestamp=timestamp,
            ),
        )

    async def search_memory(
        ctx: Context,
        query: Annotated[
            Query,
            Field(description="What to recall, as a question or topic: 'What pets does Ann have?'"),
        ],
        k: Annotated[K, Field(description="How many ranked items to return.")] = 10,
        budget: Annotated[Budget | None, Field(description=SEARCH_BUDGET)] = None,
        mode: Annotated[h.Mode, Field(description=MODE)] = "gaama",
        scope: Annotated[h.ScopeArg | None, Field(description=SCOPE)] = None,
        budget_unit: Annotated[
            h.BudgetUnit | None,
            Field(description="What the budget counts: words (default) or tokens."),
        ] = None,
    ) -> Annotated[CallToolResult, h.SearchResult]:
        """Search long-term memory for what is relevant to a query.

        Call it before answering anything that may depend on earlier conversations. Returns
        `memory`, the relevant facts, reflections and verbatim turns packed within a budget
        (words, or tokens) and ready to read, and `ranked`, the top-k items; each item has its
        kind, time, score and provenance (the turns it was derived from; read one with
        get_memory). For a block to put into a prompt as it is, call get_context.
        """
        return await _run(
            gw,
            ctx,
            lambda c: h.search_memory(
                c,
                query=query,
                k=k,
                budget=budget,
                mode=mode,
                scope=scope,
                budget_unit=budget_unit,
            ),
        )

    async def get_context(
        ctx: Context,
        query: Annotated[
            Query,
            Field(description="What the context is for: the user's message or question."),
        ],
        max_tokens: Annotated[
            MaxTokens,
            Field(description="Token budget of the block (default 1000; the service may cap it)."),
        ] = 1000,
        scope: Annotated[h.ScopeArg | None, Field(description=SCOPE)] = None,
        as_of: Annotated[
            AsOf | None,
            Field(description="Epoch seconds: the memory as it stood then (default: now)."),
        ] = None,
    ) -> Annotated[CallToolResult, h.ContextResult]:
        """Get a prompt-ready block of long-term memory for a message, within a token budget.

        The block lists the facts that hold now with their dates first, then facts that no
        longer hold, reflections, and the relevant turns in time order with speaker and date;
        each line has a citation id ([F1], [R1], [E1]) that `citations` maps to a memory id.
        Put it into your prompt as it is.
        """
        return await _run(
            gw,
            ctx,
            lambda c: h.get_context(
                c, query=query, max_tokens=max_tokens, scope=scope, as_of=as_of
            ),
        )

    async def answer(
        ctx: Context,
        question: Annotated[Query, Field(description="The question to answer from memory.")],
        budget: Annotated[Budget | None, Field(description=BUDGET)] = None,
        mode: Annotated[h.Mode, Field(description=MODE)] = "gaama",
        scope: Annotated[h.ScopeArg | None, Field(description=SCOPE)] = None,
    ) -> Annotated[CallToolResult, h.AnswerResult]:
        """Answer a question from long-term memory with the memory service's own LLM.

        Returns the answer and the memory it was drawn from. Works only when the service has
        an LLM configured (otherwise a tool error says so); search_memory always works and
        lets you answer yourself.
        """
        return await _run(
            gw,
            ctx,
            lambda c: h.answer(c, question=question, budget=budget, mode=mode, scope=scope),
        )

    async def get_memory(
        ctx: Context,
        node_id: Annotated[
            NodeId,
            Field(description="A memory item's id, as returned by search_memory or remember."),
        ],
    ) -> Annotated[CallToolResult, h.MemoryNode]:
        """Read one memory item in full: its text, time, conversation, speaker, the turns it
        came from, and its neighbours in the memory graph (source turns, concepts, the next
        turn). An id that is not in your memory is "not found"."""
        return await _run(gw, ctx, lambda c: h.get_memory(c, node_id=node_id))

    async def list_memories(
        ctx: Context,
        conversation: Annotated[
            ids.ConversationId | None, Field(description="Only this conversation's memories.")
        ] = None,
        subject: Annotated[
            h.Subject | None, Field(description="Only memories about this subject.")
        ] = None,
        kind: Annotated[
            h.Kind | None,
            Field(
                description="Only this kind: episode (verbatim turns), fact, reflection, concept."
            ),
        ] = None,
        cursor: Annotated[
            Cursor | None, Field(description="`next_cursor` of the previous page.")
        ] = None,
        limit: Annotated[Limit, Field(description="Items per page.")] = 50,
    ) -> Annotated[CallToolResult, h.ListResult]:
        """List stored memories a page at a time, optionally one conversation's, subject's or
        kind's: to browse or review what is kept. To find what is relevant to something, use
        search_memory."""
        return await _run(
            gw,
            ctx,
            lambda c: h.list_memories(
                c,
                conversation=conversation,
                subject=subject,
                kind=kind,
                cursor=cursor,
                limit=limit,
            ),
        )

    async def forget(
        ctx: Context,
        conversation: Annotated[
            ids.ConversationId | None,
            Field(description="Forget everything remembered from this conversation."),
        ] = None,
        subject: Annotated[
            h.Subject | None, Field(description="Forget everything remembered about this subject.")
        ] = None,
    ) -> Annotated[CallToolResult, h.ForgetResult]:
        """Permanently delete memory: a whole conversation or everything about a subject
        (give exactly one), with the facts and reflections derived from it. Only when the
        user asks for it; it cannot be undone."""
        return await _run(
            gw,
            ctx,
            lambda c: h.forget(
                c,
                conversation=conversation,
                subject=subject,
                wait_s=gw.settings.mcp_forget_wait_s,
            ),
        )

    annotations = {
        "remember": ToolAnnotations(
            read_only_hint=False, destructive_hint=False, open_world_hint=False
        ),
        "forget": ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    }
    tools: dict[str, Tool] = {}
    for fn in (remember, search_memory, get_context, answer, get_memory, list_memories, forget):
        tool = Tool.from_function(fn, annotations=annotations.get(fn.__name__, READ_ONLY))
        # Unknown arguments are refused (ToolCalls); say so in the schema a model reads.
        tool.parameters["additionalProperties"] = False
        tools[tool.name] = tool
    assert tuple(tools) == TOOLS
    return MCPServer(
        "gaama",
        title="GAAMA long-term memory",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        tools=list(tools.values()),
        middleware=[ToolCalls(tools, gw.metrics)],
    )


# --- streamable HTTP ----------------------------------------------------------------------------


class ApiKeyGate:
    """Refuses an MCP request before any tool runs unless it carries an API key the deployment
    knows or a valid end-user token (401 missing/unknown/refused, 403 disabled, 429 after too
    many failures from the address).

    The key is checked here, with the same key ring and rules as the REST services, rather than
    only by the REST API: the REST services count failed keys per client address, and every MCP
    call reaches them from the gateway's address, so unknown keys forwarded by the gateway would
    soon throttle every MCP user at once. The check decides nothing else: the key is forwarded as
    is and the REST API alone maps it to a tenant.
    """

    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            request = Request(scope)
            address = self.auth.address(
                request.client.host if request.client else "", request.headers
            )
            try:
                self.auth.tenant(request.headers, address)
            except AuthError as exc:
                response = JSONResponse(
                    {"error": exc.message}, exc.status, headers=exc.headers() or None
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_http_app(
    server: MCPServer, gw: Gateway, settings: Settings, registry: CollectorRegistry
) -> Starlette:
    """MCP over streamable HTTP at ``/mcp`` (stateless: any replica serves any request), with
    ``/metrics``, ``/healthz`` (``degraded`` naming the query or ingest service when either is
    down) and ``/readyz`` (the gateway alone: a tool call that needs a service that is down
    fails on its own, with the service's reason)."""
    mcp_app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        host=settings.http_host,
    )

    checks = gw.dependencies()

    async def healthz(_: Request) -> Response:
        return JSONResponse(await health_body(checks))

    async def readyz(_: Request) -> Response:
        return JSONResponse({"status": "ready"})

    async def metrics(request: Request) -> Response:
        if (refused := metrics_refused(request, settings)) is not None:
            return refused
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    loop = LoopMonitor(loop_metrics("mcp", registry))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            monitor = loop.start()
            try:
                yield
            finally:
                monitor.cancel()
                await gw.aclose()

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
            Mount("/", app=mcp_app),
        ],
        middleware=[
            Middleware(TraceRequests),
            Middleware(
                ApiKeyGate, auth=Authenticator(settings, key_reload_metric("mcp", registry))
            ),
        ],
        lifespan=lifespan,
    )
