"""``gaama token mint|keygen|verify``: end-user tokens, offline, from the signing keys of
``GAAMA_SIGNING_KEYS`` and the key file (``--keys-file``, default ``GAAMA_API_KEYS_FILE``).

``mint`` prints one token (docs/operations.md, "End-user tokens"); ``keygen`` prints a new
signing key entry for the key file's ``signing_keys``; ``verify`` prints a token's claims, or
fails naming what is wrong with it.
"""

from __future__ import annotations

import argparse
import json
import secrets
from typing import Any

from gaama.errors import ConfigError


def _signing_keys(args: argparse.Namespace) -> tuple[list[Any], Any]:
    from gaama.config import check_signing_keys, load_keys, load_settings

    settings = load_settings()
    path = args.keys_file or settings.api_keys_file
    entries = list(settings.signing_keys)
    if path:
        entries += load_keys(path).signing_keys
    try:
        check_signing_keys(entries, "GAAMA_SIGNING_KEYS with the key file")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return entries, settings


def _mint(args: argparse.Namespace) -> int:
    from gaama import tokens

    entries, settings = _signing_keys(args)
    mine = [e for e in entries if e.tenant == args.tenant]
    if args.kid:
        mine = [e for e in mine if e.kid == args.kid]
        if not mine:
            raise ConfigError(f"no signing key {args.kid!r} for tenant {args.tenant!r}")
    live = [e for e in mine if not e.disabled]
    if not live:
        raise ConfigError(
            f"no enabled signing key for tenant {args.tenant!r}: add one to the key file's "
            f"signing_keys (gaama token keygen) or GAAMA_SIGNING_KEYS"
        )
    key = live[-1].signing_key()  # the newest: keys are added at the end
    try:
        token = tokens.mint(
            key,
            subject=args.subject,
            conversation=args.conversation,
            permissions=[p.strip() for p in args.perm.split(",") if p.strip()],
            ttl_s=args.ttl,
            max_ttl_s=settings.token_max_ttl_s,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    print(token)
    return 0


def _keygen(args: argparse.Namespace) -> int:
    from gaama import tokens
    from gaama.config import SigningKeyEntry

    kid = args.kid or f"{args.tenant}-{secrets.token_hex(4)}"
    entry = {"kid": kid, "tenant": args.tenant, "secret": tokens.new_secret()}
    try:
        SigningKeyEntry.model_validate(entry)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    print(json.dumps(entry))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from gaama import tokens

    entries, settings = _signing_keys(args)
    keys = {e.kid: e.signing_key() for e in entries}
    try:
        claims = tokens.verify(
            args.token.strip(),
            keys.get,
            skew_s=settings.token_clock_skew_s,
            max_ttl_s=settings.token_max_ttl_s,
        )
    except tokens.TokenError as exc:
        raise ConfigError(f"token refused ({exc.reason}): {exc}") from None
    out = {
        "tenant": claims.tenant,
        "subject": claims.subject,
        "conversation": claims.conversation,
        "permissions": sorted(claims.permissions, key=tokens.PERMISSIONS.index),
        "iat": claims.issued_at,
        "exp": claims.expires_at,
        "kid": claims.kid,
        "jti": claims.token_id,
    }
    print(json.dumps(out, ensure_ascii=False))
    return 0


def register(sub: Any) -> None:
    t = sub.add_parser("token", help="end-user tokens: mint, keygen, verify")
    actions = t.add_subparsers(dest="action", required=True)

    def keys_file(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--keys-file", default=None, help="the key file (default GAAMA_API_KEYS_FILE)"
        )

    m = actions.add_parser("mint", help="print a token bound to a tenant and a subject")
    m.add_argument("--tenant", required=True)
    m.add_argument("--subject", required=True)
    m.add_argument("--conversation", default=None, help="bind the token to one conversation")
    m.add_argument("--ttl", type=int, default=900, help="seconds the token is valid (900)")
    m.add_argument(
        "--perm", default="read", help="comma-separated: read, write, forget (default read)"
    )
    m.add_argument("--kid", default=None, help="the signing key (default: the tenant's newest)")
    keys_file(m)
    m.set_defaults(func=_mint)

    k = actions.add_parser("keygen", help="print a new signing key entry for the key file")
    k.add_argument("--tenant", required=True)
    k.add_argument("--kid", default=None, help="its id (default: <tenant>-<random>)")
    k.set_defaults(func=_keygen)

    v = actions.add_parser("verify", help="print a token's claims if the signing keys accept it")
    v.add_argument("token")
    keys_file(v)
    v.set_defaults(func=_verify)
