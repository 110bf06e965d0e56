"""FastAPI dependencies for the caller's identity: the tenant (and key) of the API key, never
of the body; 401, 403 or 429 otherwise (services.runtime.auth holds the rules). A request of a
tenant over its quota is refused here with 429 (services.runtime.admission)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from gaama.config import ApiKey
from services.runtime.admission import Admission
from services.runtime.auth import Authenticator, AuthError
from services.runtime.http import authenticate, client_address


async def current_principal(request: Request) -> AsyncIterator[ApiKey]:
    """The key entry of the request's API key, holding one of its tenant's admission slots
    while the request runs."""
    principal = authenticate(request, request.app.state.auth)
    admission: Admission = request.app.state.admission
    async with admission.admit(principal.tenant):
        yield principal


async def current_tenant(principal: Annotated[ApiKey, Depends(current_principal)]) -> str:
    return principal.tenant


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
Principal = Annotated[ApiKey, Depends(current_principal)]
Tenant = Annotated[str, Depends(current_tenant)]
Admin = Annotated[None, Depends(admin)]
