"""HTTP routes for data subject requests (forget, list, export, audit); handlers in
:mod:`services.query.memories`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import FastAPI, Query
from fastapi.responses import StreamingResponse

from gaama import ids
from gaama.errors import ValidationError
from services.query.auth import Admin, Principal, Tenant
from services.query.handlers import QueryDeps, Unavailable
from services.query.memories import (
    ForgetAccepted,
    ForgetDeps,
    ForgetStatusOut,
    ListQuery,
    MemoryPage,
    accept_forget,
    export_subject,
    forget_status,
    list_memories,
)


def register_memory_routes(app: FastAPI, deps: QueryDeps) -> None:
    def forgetting() -> ForgetDeps:
        if deps.forget is None:
            raise Unavailable("forgetting is not wired into this query service")
        return deps.forget

    def key_id(p: Principal) -> str:
        return p.key_sha256[:12]  # names the key in the audit log without revealing it

    @app.delete("/v1/conversations/{conversation_id}", status_code=202)
    async def forget_conversation(conversation_id: str, who: Principal) -> ForgetAccepted:
        """Forget a conversation: its turns and everything derived only from them."""
        return await accept_forget(
            forgetting(), who.tenant, "conversation", conversation_id, key_id(who)
        )

    @app.delete("/v1/subjects/{subject_id:path}", status_code=202)
    async def forget_subject(subject_id: str, who: Principal) -> ForgetAccepted:
        """Forget a subject: every turn about it and everything derived only from them."""
        return await accept_forget(forgetting(), who.tenant, "subject", subject_id, key_id(who))

    @app.delete("/v1/tenant", status_code=202)
    async def forget_tenant(who: Principal, _: Admin) -> ForgetAccepted:
        """Forget the whole tenant of the API key (needs an admin key too)."""
        return await accept_forget(forgetting(), who.tenant, "tenant", "", key_id(who))

    @app.get("/v1/forget/{request_id}")
    async def forget_request(request_id: str, tenant: Tenant) -> ForgetStatusOut:
        """Where a forget request stands: ``pending`` or ``done`` with counts removed."""
        return await forget_status(forgetting(), tenant, request_id)

    @app.get("/v1/audit")
    async def audit(
        tenant: Tenant, limit: Annotated[int, Query(ge=1, le=1000)] = 100
    ) -> list[dict[str, object]]:
        """The tenant's forget audit log, newest first (no forgotten content: scope ids are
        digests)."""
        return await forgetting().forgets.audit(tenant, limit)

    @app.get("/v1/memories")
    async def memories(
        tenant: Tenant,
        conversation: str | None = None,
        subject: str | None = None,
        kind: Literal["episode", "fact", "reflection", "concept"] | None = None,
        cursor: str | None = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
    ) -> MemoryPage:
        """A page of the tenant's memory in time order; pass ``next_cursor`` for the next."""
        q = _list_query(conversation, subject, kind, cursor, limit)
        return await list_memories(deps.index, deps.graph, await deps.hidden(tenant), tenant, q)

    @app.get("/v1/export")
    async def export(tenant: Tenant, subject: str) -> StreamingResponse:
        """JSONL of every node and edge about ``subject``, with provenance."""
        try:
            ids.check_subject(subject)
        except ValueError as exc:
            raise ValidationError(f"subject: {exc}") from None
        if not subject:
            raise ValidationError("subject: must not be empty")
        hidden = await deps.hidden(tenant)

        async def lines() -> AsyncIterator[bytes]:
            async for line in export_subject(deps.index, deps.graph, hidden, tenant, subject):
                yield line

        return StreamingResponse(lines(), media_type="application/x-ndjson")


def _list_query(
    conversation: str | None,
    subject: str | None,
    kind: str | None,
    cursor: str | None,
    limit: int,
) -> ListQuery:
    from pydantic import ValidationError as PydanticValidationError

    from gaama.events import describe

    try:
        return ListQuery.model_validate(
            {
                "conversation": conversation,
                "subject": subject,
                "kind": kind,
                "cursor": cursor,
                "limit": limit,
            }
        )
    except PydanticValidationError as exc:
        raise ValidationError(describe(exc)) from None
