"""HTTP routes for data subject requests (forget, list, export, audit); handlers in
:mod:`services.query.memories`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import FastAPI, Query
from fastapi.responses import StreamingResponse

from gaama import ids
from gaama.errors import Forbidden, ValidationError
from services.query.auth import Admin, Forgetter, Principal, Reader, Tenant
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

    @app.delete("/v1/conversations/{conversation_id}", status_code=202)
    async def forget_conversation(conversation_id: str, who: Forgetter) -> ForgetAccepted:
        """Forget a conversation: its turns and everything derived only from them."""
        if who.token is not None:
            # A conversation may hold other subjects' turns: a token forgets its subject only.
            raise Forbidden(
                "a token cannot forget a conversation (it may hold other subjects' turns); "
                "forget the token's subject with DELETE /v1/subjects/{subject}"
            )
        return await accept_forget(
            forgetting(), who.tenant, "conversation", conversation_id, who.key_id
        )

    @app.delete("/v1/subjects/{subject_id:path}", status_code=202)
    async def forget_subject(subject_id: str, who: Forgetter) -> ForgetAccepted:
        """Forget a subject: every turn about it and everything derived only from them."""
        if who.token is not None:
            who.scope(subject_id, None)  # its own subject only
            if who.token.conversation is not None:
                raise Forbidden(
                    "this token is bound to one conversation; forgetting its subject reaches "
                    "every conversation"
                )
        return await accept_forget(forgetting(), who.tenant, "subject", subject_id, who.key_id)

    @app.delete("/v1/tenant", status_code=202)
    async def forget_tenant(who: Principal, _: Admin) -> ForgetAccepted:
        """Forget the whole tenant of the API key (needs an admin key too)."""
        who.tenant_wide("forgetting the tenant")
        return await accept_forget(forgetting(), who.tenant, "tenant", "", who.key_id)

    @app.get("/v1/forget/{request_id}")
    async def forget_request(request_id: str, who: Forgetter) -> ForgetStatusOut:
        """Where a forget request stands: ``pending`` or ``done`` with counts removed."""
        return await forget_status(forgetting(), who.tenant, request_id)

    @app.get("/v1/audit")
    async def audit(
        tenant: Tenant, limit: Annotated[int, Query(ge=1, le=1000)] = 100
    ) -> list[dict[str, object]]:
        """The tenant's forget audit log, newest first (no forgotten content: scope ids are
        digests)."""
        return await forgetting().forgets.audit(tenant, limit)

    @app.get("/v1/memories")
    async def memories(
        who: Reader,
        conversation: str | None = None,
        subject: str | None = None,
        kind: Literal["episode", "fact", "reflection", "concept"] | None = None,
        cursor: str | None = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
    ) -> MemoryPage:
        """A page of the tenant's memory (a token's: its scope's) in time order; pass
        ``next_cursor`` for the next."""
        subject, conversation = who.scope(subject, conversation)
        q = _list_query(conversation, subject, kind, cursor, limit)
        tenant = who.tenant
        return await list_memories(deps.index, deps.graph, await deps.hidden(tenant), tenant, q)

    @app.get("/v1/export")
    async def export(who: Reader, subject: str | None = None) -> StreamingResponse:
        """JSONL of every node and edge about ``subject`` (a token's own by default), with
        provenance."""
        subject, conversation = who.scope(subject, None)
        subject = subject or ""
        try:
            ids.check_subject(subject)
        except ValueError as exc:
            raise ValidationError(f"subject: {exc}") from None
        if not subject:
            raise ValidationError("subject: must not be empty")
        tenant = who.tenant
        hidden = await deps.hidden(tenant)

        async def lines() -> AsyncIterator[bytes]:
            async for line in export_subject(
                deps.index, deps.graph, hidden, tenant, subject, conversation
            ):
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
