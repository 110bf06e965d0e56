"""FastAPI dependencies for the caller's identity: the tenant (and key) of the API key, never
of the body; 401, 403 or 429 otherwise (services.runtime.auth holds the rules)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from gaama.config import ApiKey
from services.runtime.auth import Authenticator, AuthError


def _address(request: Request) -> str:
    return request.client.host if request.client else ""


async def current_principal(request: Request) -> ApiKey:
    """The key entry of the request's API key."""
    auth: Authenticator = request.app.state.auth
    try:
        return auth.principal(request.headers, _address(request))
    except AuthError as exc:
        raise HTTPException(exc.status, exc.message, headers=exc.headers() or None) from None


async def current_tenant(principal: Annotated[ApiKey, Depends(current_principal)]) -> str:
    return principal.tenant


async def admin(request: Request) -> None:
    """Requires ``X-Admin-Key`` (``GAAMA_ADMIN_KEYS``) on top of the tenant's own key."""
    auth: Authenticator = request.app.state.auth
    try:
        auth.require_admin(request.headers, _address(request), request.app.state.deps.settings)
    except AuthError as exc:
        raise HTTPException(exc.status, exc.message, headers=exc.headers() or None) from None


# Module level: FastAPI resolves the (postponed) annotations in the modules that use them.
Principal = Annotated[ApiKey, Depends(current_principal)]
Tenant = Annotated[str, Depends(current_tenant)]
Admin = Annotated[None, Depends(admin)]
