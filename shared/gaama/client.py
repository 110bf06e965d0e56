"""HTTP clients of the GAAMA services: :class:`GaamaClient` (sync) and :class:`AsyncGaamaClient`.

Both speak to the query service (``/v1/search``, ``/v1/context``, ``/v1/answer``,
``/v1/nodes/{id}``, ``/v1/memories``, ``/v1/export``, ``/v1/audit``, forgetting: ``DELETE
/v1/conversations/{id}``, ``DELETE /v1/subjects/{id}``, ``DELETE /v1/tenant``, ``GET
/v1/forget/{request_id}``) and to the ingest service (``POST /v1/turns``), authenticating with
``Authorization: Bearer <key>``. A 4xx or 5xx answer raises :class:`GaamaAPIError` carrying the
status and the server's message.

Example::

    with GaamaClient("http://127.0.0.1:8084", api_key, ingest_url="http://127.0.0.1:8081") as c:
        c.add_turns([{"conversation": "c1", "speaker": "Ann", "text": "Hi", "timestamp": "..."}])
        hits = c.search("What does Ann like?", k=10)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx

from gaama.errors import GaamaError

Mode = Literal["gaama", "semantic", "ppr"]
MemoryKind = Literal["episode", "fact", "reflection", "concept"]
JSON = dict[str, Any]
_RETRYABLE = frozenset({408, 429, 502, 503, 504})
_Transport = TypeVar("_Transport")


class RetrievalOptions(TypedDict, total=False):
    """Keyword options of ``answer`` and ``search``; the server's defaults fill what is left out.

    Keys:
        mode: ``gaama`` (default), ``semantic`` or ``ppr``.
        budget: Budget of the packed memory (in ``budget_unit``).
        budget_unit: ``words`` (the server's default unless its operator set another) or
            ``tokens`` (the embedder's tokenizer).
        subject: Only memory about this subject.
        conversation: Only memory from this conversation.
        params: Per-request retrieval parameters (``alpha``, ...).
    """

    mode: Mode
    budget: int | None
    budget_unit: Literal["words", "tokens"] | None
    subject: str | None
    conversation: str | None
    params: Mapping[str, float] | None


class ContextOptions(TypedDict, total=False):
    """Keyword options of ``get_context``; the server's defaults fill what is left out.

    Keys:
        messages: The chat, ``[{"role": "user", "content": ...}, ...]``: its last user
            message(s) make the query.
        max_tokens: Token budget of the whole block (default 1000).
        subject: Only memory about this subject.
        conversation: Only memory from this conversation.
        as_of: Epoch seconds: the memory as it stood then.
        mode: ``gaama`` (default), ``semantic`` or ``ppr``.
        params: Per-request retrieval parameters (``alpha``, ...).
    """

    messages: Sequence[Mapping[str, str]] | None
    max_tokens: int | None
    subject: str | None
    conversation: str | None
    as_of: float | None
    mode: Mode
    params: Mapping[str, float] | None


class SearchOptions(RetrievalOptions, total=False):
    """:class:`RetrievalOptions` and ``k``, the number of ranked items (default 20)."""

    k: int


class MemoriesOptions(TypedDict, total=False):
    """Filters and paging of ``memories``: ``conversation``, ``subject``, ``kind``, ``cursor``
    (the previous page's ``next_cursor``) and ``limit`` (default 50)."""

    conversation: str | None
    subject: str | None
    kind: MemoryKind | None
    cursor: str | None
    limit: int


class GaamaAPIError(GaamaError):
    """A GAAMA service answered with an error status.

    Attributes:
        status_code: The HTTP status.
        message: The server's message (its ``error`` field, or the raw body).
        body: The decoded JSON body, when there was one.
    """

    reason = "api_error"

    def __init__(self, status_code: int, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message
        self.body = body
        self.retryable = status_code in _RETRYABLE


def mint_token(
    secret: str,
    *,
    kid: str,
    tenant: str,
    subject: str,
    permissions: Sequence[str] = ("read",),
    ttl_s: int = 900,
    conversation: str | None = None,
) -> str:
    """An end-user token, minted offline by a platform's back end with its signing secret.

    Pass the token where an API key goes (``GaamaClient(url, token)``, an MCP host's
    ``Authorization: Bearer``): every request is then bound to ``subject`` (and
    ``conversation``, when given) and to ``permissions`` (``read``, ``write``, ``forget``),
    for ``ttl_s`` seconds.

    Args:
        secret: The signing key's ``secret`` as the key file holds it (base64url).
        kid: The signing key's id.
        tenant: The signing key's tenant.
        subject: The end user the token acts for.
        permissions: What the token allows.
        ttl_s: Lifetime in seconds (at most the services' ``GAAMA_TOKEN_MAX_TTL_S``).
        conversation: Bind the token to this conversation too.

    Raises:
        ValueError: a malformed secret, subject, conversation, permission or lifetime.
    """
    from gaama import tokens

    key = tokens.SigningKey.from_text(kid, tenant, secret)
    return tokens.mint(
        key,
        subject=subject,
        conversation=conversation,
        permissions=permissions,
        ttl_s=ttl_s,
        max_ttl_s=max(ttl_s, 1),
    )


def _raise_for_status(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    body: Any = None
    message = resp.text or resp.reason_phrase
    with contextlib.suppress(ValueError):  # a proxy's HTML error page is not JSON
        body = resp.json()
    if isinstance(body, dict):
        detail = body.get("error", body.get("detail"))
        if detail is not None:
            message = detail if isinstance(detail, str) else str(detail)
    raise GaamaAPIError(resp.status_code, message, body)


def _json(resp: httpx.Response) -> JSON:
    _raise_for_status(resp)
    data: JSON = resp.json()
    return data


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}


def _retrieval_body(options: RetrievalOptions) -> JSON:
    body: JSON = {"mode": options.get("mode", "gaama")}
    if (budget := options.get("budget")) is not None:
        body["budget"] = budget
    if unit := options.get("budget_unit"):
        body["budget_unit"] = unit
    scope = {k: v for k in ("subject", "conversation") if (v := options.get(k))}
    if scope:
        body["scope"] = scope
    if params := options.get("params"):
        body["params"] = dict(params)
    return body


def _turns_body(turns: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> JSON:
    if isinstance(turns, Mapping):
        return {"turns": [dict(turns)]}
    return {"turns": [dict(t) for t in turns]}


def _memories_params(options: MemoriesOptions) -> dict[str, str | int]:
    params: dict[str, str | int] = {"limit": options.get("limit", 50)}
    for name in ("conversation", "subject", "kind", "cursor"):
        value = options.get(name)
        if isinstance(value, str):
            params[name] = value
    return params


def _segment(value: str) -> str:
    """One path segment: an id may hold ``/``, ``?``, ``#`` or ``%``; none may reshape the URL."""
    return quote(value, safe="")


def _request_id(resp: httpx.Response) -> str:
    return str(_json(resp)["request_id"])


def _episode_ids(resp: httpx.Response) -> list[str]:
    return list(_json(resp).get("episode_ids", []))


def _json_list(resp: httpx.Response) -> list[JSON]:
    _raise_for_status(resp)
    return list(resp.json())


@dataclass(frozen=True)
class _Request:
    """One call, built once for both clients: what each sends through its own httpx client."""

    method: str
    url: str
    json: JSON | None = None
    params: Mapping[str, str | int] | None = None
    headers: Mapping[str, str] | None = None


def _search(query: str, options: SearchOptions) -> _Request:
    body = {"query": query, "k": options.get("k", 20), **_retrieval_body(options)}
    return _Request("POST", "/v1/search", json=body)


def _context(query: str | None, options: ContextOptions) -> _Request:
    body: JSON = {"mode": options.get("mode", "gaama")}
    if query is not None:
        body["query"] = query
    if (messages := options.get("messages")) is not None:
        body["messages"] = [dict(m) for m in messages]
    for name in ("max_tokens", "as_of"):
        if (value := options.get(name)) is not None:
            body[name] = value
    scope = {k: v for k in ("subject", "conversation") if (v := options.get(k))}
    if scope:
        body["scope"] = scope
    if params := options.get("params"):
        body["params"] = dict(params)
    return _Request("POST", "/v1/context", json=body)


def _answer(question: str, options: RetrievalOptions) -> _Request:
    body = {"question": question, **_retrieval_body(options)}
    return _Request("POST", "/v1/answer", json=body)


def _node(node_id: str) -> _Request:
    return _Request("GET", f"/v1/nodes/{node_id}")


def _add_turns(
    ingest_url: str | None, turns: Sequence[Mapping[str, Any]] | Mapping[str, Any]
) -> _Request:
    if not ingest_url:
        raise GaamaError("add_turns needs the ingest service's URL (ingest_url=...)")
    return _Request("POST", f"{ingest_url}/v1/turns", json=_turns_body(turns))


def _forget_tenant(admin_key: str) -> _Request:
    return _Request("DELETE", "/v1/tenant", headers={"X-Admin-Key": admin_key})


def _memories(options: MemoriesOptions) -> _Request:
    return _Request("GET", "/v1/memories", params=_memories_params(options))


def _forget_conversation(conversation: str) -> _Request:
    return _Request("DELETE", f"/v1/conversations/{_segment(conversation)}")


def _forget_subject(subject: str) -> _Request:
    return _Request("DELETE", f"/v1/subjects/{_segment(subject)}")


def _forget_status(request_id: str) -> _Request:
    return _Request("GET", f"/v1/forget/{_segment(request_id)}")


def _export(subject: str) -> _Request:
    return _Request("GET", "/v1/export", params={"subject": subject})


def _audit(limit: int) -> _Request:
    return _Request("GET", "/v1/audit", params={"limit": limit})


def _export_line(line: str) -> JSON | None:
    """One line of the export stream: a node or an edge, or None for a blank line."""
    return json.loads(line) if line.strip() else None


class _ClientBase(Generic[_Transport]):
    """What both clients share: the ingest URL and how their httpx client is opened.

    Args:
        base_url: The query service, e.g. ``http://127.0.0.1:8084``.
        api_key: The tenant's API key.
        ingest_url: The ingest service, needed only by ``add_turns``.
        timeout: Seconds per request.
        transport: An httpx transport (tests pass ``httpx.MockTransport`` or a WSGI/ASGI one).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        ingest_url: str | None = None,
        timeout: float = 30.0,
        transport: _Transport | None = None,
    ) -> None:
        self.ingest_url = ingest_url.rstrip("/") if ingest_url else None
        self._open(
            {"base_url": base_url, "headers": _headers(api_key), "timeout": timeout},
            transport,
        )

    def _open(self, options: dict[str, Any], transport: _Transport | None) -> None:
        raise NotImplementedError


class GaamaClient(_ClientBase[httpx.BaseTransport]):
    """Blocking client (arguments: :class:`_ClientBase`)."""

    def _open(self, options: dict[str, Any], transport: httpx.BaseTransport | None) -> None:
        self._http = httpx.Client(transport=transport, **options)

    def _send(self, req: _Request) -> httpx.Response:
        return self._http.request(
            req.method, req.url, json=req.json, params=req.params, headers=req.headers
        )

    def search(self, query: str, **options: Unpack[SearchOptions]) -> JSON:
        """``POST /v1/search``: ``{memory, ranked, words, mode, stats}``."""
        return _json(self._send(_search(query, options)))

    def get_context(self, query: str | None = None, **options: Unpack[ContextOptions]) -> JSON:
        """``POST /v1/context``: ``{context, items, citations, tokens, query}``, a prompt-ready
        block of memory for ``query`` (or the last user ``messages``) within ``max_tokens``."""
        return _json(self._send(_context(query, options)))

    def answer(self, question: str, **options: Unpack[RetrievalOptions]) -> JSON:
        """``POST /v1/answer``: ``{answer, memory, words, mode, stats}``."""
        return _json(self._send(_answer(question, options)))

    def node(self, node_id: str) -> JSON:
        """``GET /v1/nodes/{id}``: the node with its neighbours."""
        return _json(self._send(_node(node_id)))

    def add_turns(self, turns: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> list[str]:
        """``POST {ingest_url}/v1/turns``; returns the episode ids of the accepted turns."""
        return _episode_ids(self._send(_add_turns(self.ingest_url, turns)))

    def forget_tenant(self, admin_key: str) -> str:
        """``DELETE /v1/tenant`` (the key's tenant; needs an admin key); the request id."""
        return _request_id(self._send(_forget_tenant(admin_key)))

    def memories(self, **options: Unpack[MemoriesOptions]) -> JSON:
        """``GET /v1/memories``: one page, ``{items, next_cursor}``; pass ``next_cursor`` back
        as ``cursor`` for the next page (``None`` when there is none)."""
        return _json(self._send(_memories(options)))

    def forget_conversation(self, conversation: str) -> str:
        """``DELETE /v1/conversations/{id}``: everything stored from the conversation is removed
        in the background; returns the request id for :meth:`forget_status`."""
        return _request_id(self._send(_forget_conversation(conversation)))

    def forget_subject(self, subject: str) -> str:
        """``DELETE /v1/subjects/{id}``: like :meth:`forget_conversation`, for a subject."""
        return _request_id(self._send(_forget_subject(subject)))

    def forget_status(self, request_id: str) -> JSON:
        """``GET /v1/forget/{request_id}``: ``{status: pending|done, removed}``."""
        return _json(self._send(_forget_status(request_id)))

    def export(self, subject: str) -> Iterator[JSON]:
        """``GET /v1/export?subject=``: every node and edge about ``subject``, streamed."""
        req = _export(subject)
        with self._http.stream(req.method, req.url, params=req.params) as resp:
            if resp.status_code >= 400:
                resp.read()
                _raise_for_status(resp)
            for line in resp.iter_lines():
                if (item := _export_line(line)) is not None:
                    yield item

    def audit(self, limit: int = 100) -> list[JSON]:
        """``GET /v1/audit``: the tenant's forget audit log, newest first."""
        return _json_list(self._send(_audit(limit)))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GaamaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncGaamaClient(_ClientBase[httpx.AsyncBaseTransport]):
    """Asyncio client; the same methods as :class:`GaamaClient`, awaited."""

    def _open(self, options: dict[str, Any], transport: httpx.AsyncBaseTransport | None) -> None:
        self._http = httpx.AsyncClient(transport=transport, **options)

    async def _send(self, req: _Request) -> httpx.Response:
        return await self._http.request(
            req.method, req.url, json=req.json, params=req.params, headers=req.headers
        )

    async def search(self, query: str, **options: Unpack[SearchOptions]) -> JSON:
        """See :meth:`GaamaClient.search`."""
        return _json(await self._send(_search(query, options)))

    async def get_context(
        self, query: str | None = None, **options: Unpack[ContextOptions]
    ) -> JSON:
        """See :meth:`GaamaClient.get_context`."""
        return _json(await self._send(_context(query, options)))

    async def answer(self, question: str, **options: Unpack[RetrievalOptions]) -> JSON:
        """See :meth:`GaamaClient.answer`."""
        return _json(await self._send(_answer(question, options)))

    async def node(self, node_id: str) -> JSON:
        """See :meth:`GaamaClient.node`."""
        return _json(await self._send(_node(node_id)))

    async def add_turns(self, turns: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> list[str]:
        """See :meth:`GaamaClient.add_turns`."""
        return _episode_ids(await self._send(_add_turns(self.ingest_url, turns)))

    async def forget_tenant(self, admin_key: str) -> str:
        """See :meth:`GaamaClient.forget_tenant`."""
        return _request_id(await self._send(_forget_tenant(admin_key)))

    async def memories(self, **options: Unpack[MemoriesOptions]) -> JSON:
        """See :meth:`GaamaClient.memories`."""
        return _json(await self._send(_memories(options)))

    async def forget_conversation(self, conversation: str) -> str:
        """See :meth:`GaamaClient.forget_conversation`."""
        return _request_id(await self._send(_forget_conversation(conversation)))

    async def forget_subject(self, subject: str) -> str:
        """See :meth:`GaamaClient.forget_subject`."""
        return _request_id(await self._send(_forget_subject(subject)))

    async def forget_status(self, request_id: str) -> JSON:
        """See :meth:`GaamaClient.forget_status`."""
        return _json(await self._send(_forget_status(request_id)))

    async def export(self, subject: str) -> AsyncIterator[JSON]:
        """See :meth:`GaamaClient.export`."""
        req = _export(subject)
        async with self._http.stream(req.method, req.url, params=req.params) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                _raise_for_status(resp)
            async for line in resp.aiter_lines():
                if (item := _export_line(line)) is not None:
                    yield item

    async def audit(self, limit: int = 100) -> list[JSON]:
        """See :meth:`GaamaClient.audit`."""
        return _json_list(await self._send(_audit(limit)))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncGaamaClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
