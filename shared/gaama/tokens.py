"""End-user tokens: short-lived signed credentials bound to one tenant, one subject, optionally
one conversation, and a set of permissions (``read``, ``write``, ``forget``).

A token is a JSON Web Token (RFC 7519) signed with HMAC-SHA256 (``HS256``, RFC 7518 §3.2) under
one of its tenant's signing keys::

    header  {"alg": "HS256", "typ": "JWT", "kid": "<signing key id>"}
    payload {"aud": "gaama", "tenant": "acme", "sub": "user-42", "conv": "chat-7",
             "perm": ["read", "write"], "iat": 1767225600, "exp": 1767226500, "jti": "<hex>"}

``conv`` is present only for a token bound to one conversation. :func:`mint` makes one;
:func:`verify` checks one and returns its :class:`TokenClaims`, or raises :class:`TokenError`
naming what is wrong (malformed, bad signature, unknown key id, another tenant's key, expired,
not valid yet, lifetime over the maximum, key disabled). Verification is strict: only ``HS256``,
canonical base64url, JSON objects without duplicate names, integer times.

Example::

    key = SigningKey.from_text("acme-1", "acme", secret_text)
    token = mint(key, subject="user-42", permissions=["read", "write"], ttl_s=900)
    claims = verify(token, {key.kid: key}.get)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gaama import ids
from gaama.errors import Forbidden, PermanentError

#: What a token may allow; a tenant's API key allows all of them and more.
PERMISSIONS = ("read", "write", "forget")
#: The ``aud`` claim of every token: a JWT minted for something else is refused.
AUDIENCE = "gaama"
#: Longest token accepted; anything longer is refused before it is decoded.
TOKEN_MAX = 4096
#: Shortest signing secret, in bytes (HS256's key should be at least the hash's size).
SECRET_MIN_BYTES = 32
#: A signing key id: what the ``kid`` header names.
KID_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}$"
DEFAULT_SKEW_S = 30.0
DEFAULT_MAX_TTL_S = 86400

_KID = re.compile(KID_PATTERN)
_B64URL = re.compile(r"^[A-Za-z0-9_\-]*$")
_HEADER_FIELDS = frozenset({"alg", "typ", "kid"})


class TokenError(PermanentError):
    """A token that cannot be accepted; ``reason`` says why (``malformed``, ``bad_signature``,
    ``unknown_kid``, ``wrong_tenant``, ``expired``, ``not_yet_valid``, ``too_long_lived``,
    ``disabled_kid``)."""

    reason = "token"


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One signing key of one tenant. ``secret`` is the raw HMAC key (never printed)."""

    kid: str
    tenant: str
    secret: bytes = field(repr=False)
    disabled: bool = False

    def __post_init__(self) -> None:
        if not _KID.match(self.kid):
            raise ValueError(f"kid {ids.preview(self.kid)}: expected 1-64 of A-Z a-z 0-9 _ . -")
        if len(self.secret) < SECRET_MIN_BYTES:
            raise ValueError(
                f"signing key {self.kid!r}: the secret has {len(self.secret)} bytes; at least "
                f"{SECRET_MIN_BYTES} needed"
            )

    @classmethod
    def from_text(cls, kid: str, tenant: str, secret: str, *, disabled: bool = False) -> SigningKey:
        """A key whose secret is written as in the key file: base64url (padding optional)."""
        return cls(kid, tenant, decode_secret(secret), disabled)


def new_secret() -> str:
    """A fresh signing secret (32 random bytes) as the key file holds it: base64url text."""
    return _b64(secrets.token_bytes(SECRET_MIN_BYTES))


def decode_secret(text: str) -> bytes:
    """The bytes of a secret written as base64url; ``ValueError`` naming the problem."""
    raw = _unb64(text.rstrip("="))
    if raw is None:
        raise ValueError(
            "the secret must be base64url text (A-Z a-z 0-9 - _), e.g. from 'gaama token keygen'"
        )
    if len(raw) < SECRET_MIN_BYTES:
        raise ValueError(
            f"the secret decodes to {len(raw)} bytes; at least {SECRET_MIN_BYTES} needed"
        )
    return raw


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What a verified token allows: one tenant, one subject, optionally one conversation."""

    tenant: str
    subject: str
    conversation: str | None
    permissions: frozenset[str]
    issued_at: int
    expires_at: int
    kid: str
    token_id: str

    def allows(self, permission: str) -> bool:
        return permission in self.permissions

    def require(self, permission: str) -> None:
        """Raises:
        Forbidden: the token does not carry ``permission``."""
        if permission not in self.permissions:
            held = ", ".join(sorted(self.permissions))
            raise Forbidden(f"this token does not allow {permission!r} (it allows {held})")

    def scope(self, subject: str | None, conversation: str | None) -> tuple[str, str | None]:
        """The scope a request of this token reads or writes: the token's subject, and its
        conversation when it is bound to one, else the request's (which narrows it).

        Raises:
            Forbidden: the request names another subject or another conversation.
        """
        if subject and subject != self.subject:
            raise Forbidden(
                "this token is bound to another subject; leave 'subject' out or "
                "give the token's own"
            )
        if self.conversation is None:
            return self.subject, conversation or None
        if conversation and conversation != self.conversation:
            raise Forbidden(
                "this token is bound to another conversation; leave "
                "'conversation' out or give the token's own"
            )
        return self.subject, self.conversation

    def covers(self, subject: str, conversation: str) -> bool:
        """Whether a node whose own ``subject`` and ``conversation`` fields are these lies in the
        token's scope: the rule scoped reads apply to those fields
        (:func:`gaama.store.index_layout.scope_filter`, ``expand.lua``'s ``in_scope``)."""
        return subject == self.subject and (
            self.conversation is None or conversation == self.conversation
        )


def mint(
    key: SigningKey,
    *,
    subject: str,
    permissions: Iterable[str],
    ttl_s: int,
    conversation: str | None = None,
    now: float | None = None,
    max_ttl_s: int = DEFAULT_MAX_TTL_S,
) -> str:
    """A token of ``key``'s tenant for ``subject`` (and ``conversation``), valid ``ttl_s``
    seconds from ``now`` (default: the clock).

    Raises:
        ValueError: an empty or malformed subject or conversation, an unknown or no permission,
            a ``ttl_s`` outside 1..``max_ttl_s``, or a disabled key.
    """
    if key.disabled:
        raise ValueError(f"signing key {key.kid!r} is disabled")
    if not subject:
        raise ValueError("subject: must not be empty")
    ids.check_subject(subject)
    if conversation is not None:
        ids.check_conversation(conversation)
    perms = _permissions(list(permissions))
    if not 1 <= ttl_s <= max_ttl_s:
        raise ValueError(f"ttl: {ttl_s} s; it must be 1..{max_ttl_s} (GAAMA_TOKEN_MAX_TTL_S)")
    iat = int(time.time() if now is None else now)
    header = {"alg": "HS256", "typ": "JWT", "kid": key.kid}
    payload: dict[str, Any] = {"aud": AUDIENCE, "tenant": key.tenant, "sub": subject}
    if conversation is not None:
        payload["conv"] = conversation
    payload |= {"perm": perms, "iat": iat, "exp": iat + int(ttl_s), "jti": secrets.token_hex(8)}
    signing_input = _b64(_compact(header)) + "." + _b64(_compact(payload))
    return signing_input + "." + _b64(_sign(key.secret, signing_input))


def verify(
    token: str,
    keys: Callable[[str], SigningKey | None],
    *,
    now: float | None = None,
    skew_s: float = DEFAULT_SKEW_S,
    max_ttl_s: int = DEFAULT_MAX_TTL_S,
) -> TokenClaims:
    """The claims of ``token`` if one of ``keys`` (looked up by ``kid``) signed it and it is
    valid at ``now`` give or take ``skew_s`` seconds.

    Raises:
        TokenError: what is wrong with it (see :class:`TokenError` for the reasons).
    """
    if len(token) > TOKEN_MAX:
        raise TokenError(f"token longer than {TOKEN_MAX} characters", reason="malformed")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("not a token: expected header.payload.signature", reason="malformed")
    header = _object(parts[0], "header")
    if header.get("alg") != "HS256" or set(header) - _HEADER_FIELDS:
        raise TokenError("token header: only alg HS256 with typ and kid", reason="malformed")
    if header.get("typ", "JWT") != "JWT":
        raise TokenError("token header: typ must be JWT", reason="malformed")
    kid = header.get("kid")
    if not isinstance(kid, str) or not _KID.match(kid):
        raise TokenError("token header: no valid kid", reason="malformed")
    key = keys(kid)
    if key is None:
        raise TokenError(f"unknown signing key {kid!r}", reason="unknown_kid")
    signature = _unb64(parts[2])
    expected = _sign(key.secret, parts[0] + "." + parts[1])
    if signature is None or not hmac.compare_digest(signature, expected):
        raise TokenError("bad token signature", reason="bad_signature")
    if key.disabled:
        raise TokenError(f"signing key {kid!r} is disabled", reason="disabled_kid")
    return _claims(_object(parts[1], "payload"), key, now, skew_s, max_ttl_s)


def looks_like_token(credential: str) -> bool:
    """Whether a presented credential has a token's shape (three base64url parts, the first a
    JSON object) rather than an API key's."""
    return credential.count(".") == 2 and credential.startswith("eyJ")


def token_digest(token: str) -> str:
    """A short digest naming a token in logs without revealing it."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:12]


# --- internals --------------------------------------------------------------------------------


def _claims(
    p: dict[str, Any], key: SigningKey, now: float | None, skew_s: float, max_ttl_s: int
) -> TokenClaims:
    if p.get("aud") != AUDIENCE:
        raise TokenError(f"token audience is not {AUDIENCE!r}", reason="malformed")
    if p.get("tenant") != key.tenant:
        raise TokenError(
            "the token's tenant is not its signing key's tenant", reason="wrong_tenant"
        )
    subject, conversation = p.get("sub"), p.get("conv")
    iat, exp, jti = p.get("iat"), p.get("exp"), p.get("jti", "")
    try:
        if not isinstance(subject, str) or not subject:
            raise ValueError("sub: a non-empty subject is required")
        ids.check_subject(subject)
        if conversation is not None:
            if not isinstance(conversation, str):
                raise ValueError("conv: must be a string")
            ids.check_conversation(conversation)
        perm = p.get("perm")
        if not isinstance(perm, list):
            raise ValueError("perm: must be a list of permissions")
        perms = _permissions(perm)
        if not (_is_int(iat) and _is_int(exp)) or not isinstance(jti, str) or len(jti) > 64:
            raise ValueError("iat and exp must be integers (epoch seconds), jti a short string")
    except ValueError as exc:
        raise TokenError(f"token claims: {exc}", reason="malformed") from None
    assert isinstance(iat, int) and isinstance(exp, int)
    if exp <= iat or exp - iat > max_ttl_s:
        raise TokenError(
            f"token lifetime {exp - iat} s; it must be 1..{max_ttl_s} (GAAMA_TOKEN_MAX_TTL_S)",
            reason="too_long_lived",
        )
    clock = time.time() if now is None else now
    if clock >= exp + skew_s:
        raise TokenError("token expired", reason="expired")
    if iat > clock + skew_s:
        raise TokenError("token issued in the future (check the clocks)", reason="not_yet_valid")
    return TokenClaims(
        tenant=key.tenant,
        subject=subject,
        conversation=conversation,
        permissions=frozenset(perms),
        issued_at=iat,
        expires_at=exp,
        kid=key.kid,
        token_id=jti,
    )


def _permissions(perms: list[Any]) -> list[str]:
    unknown = [p for p in perms if p not in PERMISSIONS]
    if unknown or not perms:
        raise ValueError(
            f"permissions: {', '.join(map(repr, unknown)) or 'none given'}; each must be one of "
            f"{', '.join(PERMISSIONS)}"
        )
    return sorted(set(perms), key=PERMISSIONS.index)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _sign(secret: bytes, signing_input: str) -> bytes:
    return hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()


def _compact(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes | None:
    """base64url without padding, canonical only (one text per byte string), else None."""
    if not _B64URL.match(text) or len(text) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if _b64(raw) == text else None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate name {k!r}")
        out[k] = v
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _object(part: str, what: str) -> dict[str, Any]:
    raw = _unb64(part)
    if raw is None:
        raise TokenError(f"token {what}: not base64url", reason="malformed")
    try:
        obj = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constants
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise TokenError(f"token {what}: not JSON ({exc})", reason="malformed") from None
    if not isinstance(obj, dict):
        raise TokenError(f"token {what}: not a JSON object", reason="malformed")
    return obj
