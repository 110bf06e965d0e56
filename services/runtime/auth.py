"""API keys → tenants for HTTP endpoints. The tenant is never read from a request body.

- Keys come from ``GAAMA_API_KEYS`` and, when set, ``GAAMA_API_KEYS_FILE``, which is re-read when
  it changes (checked every ``GAAMA_API_KEYS_RELOAD_S``): add a tenant's new key, move its
  clients over, then disable or remove the old one, with no restart. A file that fails to
  parse is reported and the keys already loaded stay in force (a typo must not lock everyone
  out).
- End-user tokens (:mod:`gaama.tokens`) are accepted wherever a key is: a credential that is
  no API key but has a token's shape is verified against the signing keys of the same sources
  (``GAAMA_SIGNING_KEYS``, the key file's ``signing_keys``; re-read like the keys). The
  :class:`Caller` of a token carries its claims: the routes force its subject and conversation
  and check its permissions; a tenant key's caller has every right.
- Only SHA-256 digests are stored; a presented key is hashed and compared with every digest in
  constant time. Keys longer than ``API_KEY_MAX`` are refused before hashing.
- Failed attempts (unknown keys and refused tokens alike) are counted per client address;
  past ``GAAMA_AUTH_FAIL_LIMIT`` in ``GAAMA_AUTH_FAIL_WINDOW_S`` the address gets 429 with
  ``Retry-After`` until the window passes, so keys cannot be guessed at line rate. The count
  is per replica (in memory): with N replicas an address gets at most N times the limit,
  which still bounds guessing.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import Counter

from gaama.config import (
    API_KEY_MAX,
    ApiKey,
    Settings,
    SigningKeyEntry,
    check_key_tenants,
    check_signing_keys,
    hash_api_key,
    load_keys,
    match_key,
)
from gaama.errors import ConfigError, Forbidden
from gaama.tokens import SigningKey, TokenClaims, TokenError, looks_like_token, verify
from services.runtime.proxies import TrustedProxies

log = logging.getLogger("gaama.auth")

#: Client addresses whose failures are remembered; the oldest are forgotten beyond this.
_MAX_TRACKED = 10_000


class AuthError(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        if self.status == 401:
            return {"WWW-Authenticate": "Bearer"}
        if self.retry_after is not None:
            return {"Retry-After": str(self.retry_after)}
        return {}


def api_key_from_headers(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization") or headers.get("Authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return headers.get("x-api-key") or headers.get("X-API-Key") or None


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request acts for: a tenant key (every right of its tenant) or an end-user token
    (its claims bound the request).

    Attributes:
        tenant: The tenant, from the credential, never from the request.
        key_id: Names the credential in the audit log without revealing it.
        token: The token's claims; ``None`` for a tenant key.
    """

    tenant: str
    key_id: str
    token: TokenClaims | None = None

    def require(self, permission: str) -> None:
        """Raises:
        Forbidden: a token without ``permission`` (a tenant key has them all)."""
        if self.token is not None:
            self.token.require(permission)

    def scope(self, subject: str | None, conversation: str | None) -> tuple[str | None, str | None]:
        """The subject and conversation a request may read or write: the request's own for a
        tenant key; for a token, its subject and its conversation if bound (a request may
        narrow to one conversation, never widen).

        Raises:
            Forbidden: a token and a request naming another subject or conversation.
        """
        if self.token is None:
            return subject or None, conversation or None
        return self.token.scope(subject, conversation)

    def covers(self, subject: str, conversation: str) -> bool:
        """Whether a node with these own scopes is within the caller's reach."""
        return self.token is None or self.token.covers(subject, conversation)

    def tenant_wide(self, what: str) -> None:
        """Raises:
        Forbidden: a token asking for ``what``, which reaches the whole tenant."""
        if self.token is not None:
            raise Forbidden(f"{what} reaches the whole tenant: it needs the tenant's API key")


class KeyRing:
    """The keys in force: the settings' API and signing keys plus the reloadable key file's."""

    def __init__(self, settings: Settings, reload_failures: Counter | None = None) -> None:
        self._static = list(settings.api_keys)
        self._reload_failures = reload_failures
        self._static_signing = list(settings.signing_keys)
        self._path = settings.api_keys_file
        self._every = settings.api_keys_reload_s
        self._stamp: tuple[int, int] | None = None
        self._checked = float("-inf")
        self._keys = list(self._static)
        self._signing = _by_kid(self._static_signing)
        self.reload_errors = 0
        if self._path:  # at start-up a bad file is fatal, like any bad setting
            self._load(strict=True)

    @property
    def keys(self) -> list[ApiKey]:
        self._maybe_reload()
        return self._keys

    def match(self, key: str) -> ApiKey | None:
        return match_key(self.keys, key)

    def signing_key(self, kid: str) -> SigningKey | None:
        """The signing key named ``kid`` (any tenant's; a token's tenant must be its key's)."""
        self._maybe_reload()
        return self._signing.get(kid)

    def _maybe_reload(self) -> None:
        if not self._path:
            return
        now = time.monotonic()
        if now - self._checked < self._every:
            return
        self._checked = now
        self._load(strict=False)

    def _load(self, *, strict: bool) -> None:
        assert self._path is not None
        try:
            st = os.stat(self._path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            loaded = load_keys(self._path)
            keys = [*self._static, *loaded.api_keys]
            check_key_tenants(keys, "GAAMA_API_KEYS with GAAMA_API_KEYS_FILE")
            entries = [*self._static_signing, *loaded.signing_keys]
            check_signing_keys(entries, "GAAMA_SIGNING_KEYS with GAAMA_API_KEYS_FILE")
            signing = _by_kid(entries)
        except (OSError, ConfigError, ValueError) as exc:
            if strict:
                raise ConfigError(f"API keys: {exc}") from None
            self.reload_errors += 1
            if self._reload_failures is not None:
                self._reload_failures.inc()
            log.error("API key file not reloaded, the previous keys stay in force: %s", exc)
            return
        self._stamp = stamp
        if keys != self._keys or signing != self._signing:
            log.info(
                "keys reloaded from %s: %d API keys, %d signing keys",
                self._path,
                len(keys),
                len(signing),
            )
        self._keys = keys
        self._signing = signing


def _by_kid(entries: list[SigningKeyEntry]) -> dict[str, SigningKey]:
    return {e.kid: e.signing_key() for e in entries}


class FailureThrottle:
    """Failed authentications per client address in a fixed window."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self._seen: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def blocked_for(self, address: str) -> int | None:
        """Seconds until ``address`` may try again, or None when it may try now."""
        entry = self._seen.get(address)
        if entry is None:
            return None
        start, count = entry
        left = start + self.window_s - time.monotonic()
        if left <= 0:
            del self._seen[address]
            return None
        return max(1, round(left)) if count >= self.limit else None

    def failed(self, address: str) -> None:
        now = time.monotonic()
        start, count = self._seen.pop(address, (now, 0))
        if now - start >= self.window_s:
            start, count = now, 0
        self._seen[address] = (start, count + 1)
        while len(self._seen) > _MAX_TRACKED:
            self._seen.popitem(last=False)


class Authenticator:
    """Maps a request's headers and client address to its tenant, or raises AuthError."""

    def __init__(self, settings: Settings, reload_failures: Counter | None = None) -> None:
        self.ring = KeyRing(settings, reload_failures)
        self.skew_s = settings.token_clock_skew_s
        self.max_ttl_s = settings.token_max_ttl_s
        self.throttle = FailureThrottle(settings.auth_fail_limit, settings.auth_fail_window_s)
        self.proxies = TrustedProxies(settings.trusted_proxies)

    def tenant(self, headers: Mapping[str, str], address: str) -> str:
        """The tenant of the request's credential (see :meth:`principal`)."""
        return self.principal(headers, address).tenant

    def principal(self, headers: Mapping[str, str], address: str) -> Caller:
        """Who the request's API key or end-user token acts for.

        Raises:
            AuthError: 401 (missing, oversized or unknown key; a token that is malformed,
                forged, expired, of an unknown or disabled signing key), 403 (disabled key) or
                429 (a failing attempt from an ``address`` with too many recent failures; a
                valid credential is never refused for them).
        """
        # The credential is judged first: a valid key is never refused for others' failures
        # from the same address (a proxy, a NAT). Only a failing attempt meets the throttle.
        key = api_key_from_headers(headers)
        entry = self.ring.match(key) if key and len(key) <= API_KEY_MAX else None
        if entry is not None:
            if entry.disabled:
                raise AuthError(403, "this API key is disabled")
            return Caller(entry.tenant, entry.key_sha256[:12])
        if key and looks_like_token(key):
            try:
                claims = verify(
                    key, self.ring.signing_key, skew_s=self.skew_s, max_ttl_s=self.max_ttl_s
                )
            except TokenError as exc:
                self._refuse_if_throttled(address)
                self.throttle.failed(address)
                raise AuthError(401, f"token refused: {exc}") from None
            return Caller(claims.tenant, f"token:{claims.kid}:{claims.token_id}", claims)
        self._refuse_if_throttled(address)
        if not key:
            raise AuthError(
                401, "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key'"
            )
        self.throttle.failed(address)
        if len(key) > API_KEY_MAX:
            raise AuthError(401, f"API key longer than {API_KEY_MAX} characters")
        raise AuthError(401, "unknown API key")

    def _refuse_if_throttled(self, address: str) -> None:
        wait = self.throttle.blocked_for(address)
        if wait is not None:
            raise AuthError(429, "too many failed authentications; retry later", wait)

    def address(self, peer: str, headers: Mapping[str, str]) -> str:
        """The client address failures are counted under (services.runtime.proxies)."""
        return self.proxies.client(peer, headers)

    def require_admin(self, headers: Mapping[str, str], address: str, settings: Settings) -> None:
        """Check the request's ``X-Admin-Key`` against ``GAAMA_ADMIN_KEYS`` (constant time).

        Raises:
            AuthError: 403 without a valid admin key (a failed attempt counts like a bad key).
        """
        key = headers.get("x-admin-key") or headers.get("X-Admin-Key") or ""
        digest = hash_api_key(key) if 0 < len(key) <= API_KEY_MAX else ""
        ok = False
        for allowed in settings.admin_keys:
            ok |= hmac.compare_digest(allowed, digest)
        if not ok:
            self._refuse_if_throttled(address)
            self.throttle.failed(address)
            raise AuthError(403, "this needs an admin key in X-Admin-Key (GAAMA_ADMIN_KEYS)")


def metrics_allowed(headers: Mapping[str, str], settings: Settings) -> bool:
    """Whether a scrape may read /metrics: always without ``GAAMA_METRICS_TOKEN``, else only
    with ``Authorization: Bearer <token>`` (compared in constant time)."""
    if settings.metrics_token is None:
        return True
    presented = api_key_from_headers(headers) or ""
    expected = settings.metrics_token.get_secret_value()
    return hmac.compare_digest(presented.encode("utf-8", "replace"), expected.encode("utf-8"))
