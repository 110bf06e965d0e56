"""FastAPI dependencies for the caller's identity: the tenant (and key or token) of the
request's credential, never of the body; 401, 403 or 429 otherwise (services.runtime.auth holds
the rules). A request of a tenant over its quota is refused here with 429
(services.runtime.admission).

- :data:`Principal`: any valid credential (a tenant key or an end-user token); the route checks
  what a token may do.
- :data:`Reader`, :data:`Writer`, :data:`Forgetter`: a tenant key, or a token carrying that
  permission (else 403). A route taking one of them bounds the request with
  :meth:`~services.runtime.auth.Caller.scope` before reading or writing.
- :data:`Tenant`: the tenant of a tenant key only; a token is refused with 403, so a route that
  does not bound its reads to a token's scope can never be reached with one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from gaama.errors import Forbidden
from services.runtime.admission import Admission
from services.runtime.auth import Authenticator, AuthError, Caller
from services.runtime.http import authenticate, client_address


async def current_principal(request: Request) -> AsyncIterator[Caller]:
    """Who the request acts for, holding one of its tenant's admission slots while it runs."""
    principal = authenticate(request, request.app.state.auth)
    admission: Admission = request.app.state.admission
    async with admission.admit(principal.tenant):
        yield principal


async def current_tenant(principal: Annotated[Caller, Depends(current_principal)]) -> str:
    if principal.token is not None:
        raise Forbidden("this endpoint reaches the whole tenant: it needs the tenant's API key")
    return principal.tenant


def _with(permission: str) -> Callable[[Caller], Awaitable[Caller]]:
    async def check(principal: Annotated[Caller, Depends(current_principal)]) -> Caller:
        principal.require(permission)
        return principal

    return check


async def admin(request: Request) -> None:
    """Requires ``X-Admin-Key`` (``GAAMA_ADMIN_KEYS``) on top of the tenant's own key."""
    auth: Authenticator = request.app.state.auth
    try:
        auth.require_admin(
            request.headers, client_address(request, auth), request.app.state.deps.settings
        )
    except AuthError as exc:
        raise HTTPException(exc.status, exc.message, headers=exc.headers() or None) from None


# Module level: FastAPI resolves the (postponed) annotations in the modules that use them.
Principal = Annotated[Caller, Depends(current_principal)]
Reader = Annotated[Caller, Depends(_with("read"))]
Writer = Annotated[Caller, Depends(_with("write"))]
Forgetter = Annotated[Caller, Depends(_with("forget"))]
Tenant = Annotated[str, Depends(current_tenant)]
Admin = Annotated[None, Depends(admin)]
