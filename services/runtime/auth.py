"""API keys → tenants for HTTP endpoints. The tenant is never read from a request body.

- Keys come from ``GAAMA_API_KEYS`` and, when set, ``GAAMA_API_KEYS_FILE``, which is re-read when
  it changes (checked every ``GAAMA_API_KEYS_RELOAD_S``): add a tenant's new key, move its
  clients over, then disable or remove the old one, with no restart. A file that fails to
  parse is reported and the keys already loaded stay in force (a typo must not lock everyone
  out).
- Only SHA-256 digests are stored; a presented key is hashed and compared with every digest in
  constant time. Keys longer than ``API_KEY_MAX`` are refused before hashing.
- Failed attempts are counted per client address; past ``GAAMA_AUTH_FAIL_LIMIT`` in
  ``GAAMA_AUTH_FAIL_WINDOW_S`` the address gets 429 with ``Retry-After`` until the window
  passes, so keys cannot be guessed at line rate. The count is per replica (in memory): with
  N replicas an address gets at most N times the limit, which still bounds guessing.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping

from gaama.config import (
    API_KEY_MAX,
    ApiKey,
    Settings,
    check_key_tenants,
    hash_api_key,
    load_key_file,
    match_key,
)
from gaama.errors import ConfigError
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


class KeyRing:
    """The API keys in force: the settings' keys plus the reloadable key file."""

    def __init__(self, settings: Settings) -> None:
        self._static = list(settings.api_keys)
        self._path = settings.api_keys_file
        self._every = settings.api_keys_reload_s
        self._stamp: tuple[int, int] | None = None
        self._checked = float("-inf")
        self._keys = list(self._static)
        self.reload_errors = 0
        if self._path:  # at start-up a bad file is fatal, like any bad setting
            self._load(strict=True)

    @property
    def keys(self) -> list[ApiKey]:
        self._maybe_reload()
        return self._keys

    def match(self, key: str) -> ApiKey | None:
        return match_key(self.keys, key)

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
            keys = [*self._static, *load_key_file(self._path)]
            check_key_tenants(keys, "GAAMA_API_KEYS with GAAMA_API_KEYS_FILE")
        except (OSError, ConfigError, ValueError) as exc:
            if strict:
                raise ConfigError(f"API keys: {exc}") from None
            self.reload_errors += 1
            log.error("API key file not reloaded, the previous keys stay in force: %s", exc)
            return
        self._stamp = stamp
        if keys != self._keys:
            log.info("API keys reloaded from %s: %d keys", self._path, len(keys))
        self._keys = keys


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

    def __init__(self, settings: Settings) -> None:
        self.ring = KeyRing(settings)
        self.throttle = FailureThrottle(settings.auth_fail_limit, settings.auth_fail_window_s)
        self.proxies = TrustedProxies(settings.trusted_proxies)

    def tenant(self, headers: Mapping[str, str], address: str) -> str:
        """The tenant of the request's API key (see :meth:`principal`)."""
        return self.principal(headers, address).tenant

    def principal(self, headers: Mapping[str, str], address: str) -> ApiKey:
        """The key entry of the request's API key.

        Raises:
            AuthError: 401 (missing, oversized or unknown key), 403 (disabled key) or 429
                (a failing attempt from an ``address`` with too many recent failures; a valid
                key is never refused for them).
        """
        # The credential is judged first: a valid key is never refused for others' failures
        # from the same address (a proxy, a NAT). Only a failing attempt meets the throttle.
        key = api_key_from_headers(headers)
        entry = self.ring.match(key) if key and len(key) <= API_KEY_MAX else None
        if entry is not None:
            if entry.disabled:
                raise AuthError(403, "this API key is disabled")
            return entry
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
