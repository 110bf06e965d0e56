"""API keys → tenants for HTTP endpoints. The tenant is never read from a request body."""

from __future__ import annotations

from collections.abc import Mapping

from gaama.config import Settings


class AuthError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def api_key_from_headers(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization") or headers.get("Authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return headers.get("x-api-key") or headers.get("X-API-Key") or None


def tenant_for(headers: Mapping[str, str], settings: Settings) -> str:
    """The tenant of the request's API key; AuthError 401 (missing/unknown) or 403 (disabled)."""
    key = api_key_from_headers(headers)
    if not key:
        raise AuthError(401, "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key'")
    entry = settings.tenant_for_key(key)
    if entry is None:
        raise AuthError(401, "unknown API key")
    if entry.disabled:
        raise AuthError(403, "this API key is disabled")
    return entry.tenant
