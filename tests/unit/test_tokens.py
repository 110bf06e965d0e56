"""End-user tokens without services: mint and verify (expiry, clock skew, tampering, algorithm
and encoding strictness, tenants, kid rotation), the key file's signing keys and their reload,
the Authenticator's handling of tokens (throttle included), and ``gaama token``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

import pytest

from gaama import cli, tokens
from gaama.client import mint_token
from gaama.config import (
    Settings,
    SigningKeyEntry,
    hash_api_key,
    load_key_file,
    load_keys,
)
from gaama.errors import ConfigError, Forbidden
from gaama.tokens import SigningKey, TokenError, mint, verify
from services.runtime.auth import Authenticator, AuthError

NOW = 1_800_000_000
SECRET_A = tokens.new_secret()
SECRET_B = tokens.new_secret()
KEY_A = SigningKey.from_text("a1", "acme", SECRET_A)
KEY_B = SigningKey.from_text("b1", "other", SECRET_B)
KEYS = {k.kid: k for k in (KEY_A, KEY_B)}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _forge(header: dict[str, object], payload: dict[str, object], secret: bytes) -> str:
    """A token signed exactly as given (to build what mint never would)."""
    head = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(payload).encode())
    sig = hmac.new(secret, head.encode(), hashlib.sha256).digest()
    return head + "." + _b64(sig)


def _payload(**update: object) -> dict[str, object]:
    p: dict[str, object] = {
        "aud": "gaama",
        "tenant": "acme",
        "sub": "user-42",
        "perm": ["read"],
        "iat": NOW,
        "exp": NOW + 900,
        "jti": "x",
    }
    p.update(update)
    return p


def _reason(token: str, now: float = NOW, **kw: object) -> str:
    with pytest.raises(TokenError) as exc:
        verify(token, KEYS.get, now=now, **kw)  # type: ignore[arg-type]
    return exc.value.reason


# --- mint and verify ----------------------------------------------------------------------------


def test_round_trip_carries_the_binding() -> None:
    t = mint(
        KEY_A,
        subject="user/42",
        conversation="chat-7",
        permissions=["write", "read"],
        ttl_s=900,
        now=NOW,
    )
    c = verify(t, KEYS.get, now=NOW + 10)
    assert (c.tenant, c.subject, c.conversation, c.kid) == ("acme", "user/42", "chat-7", "a1")
    assert c.permissions == {"read", "write"}
    assert (c.issued_at, c.expires_at) == (NOW, NOW + 900)
    assert tokens.looks_like_token(t)
    header = json.loads(base64.urlsafe_b64decode(t.split(".")[0] + "=="))
    assert header == {"alg": "HS256", "typ": "JWT", "kid": "a1"}


def test_expiry_with_clock_skew() -> None:
    t = mint(KEY_A, subject="u", permissions=["read"], ttl_s=60, now=NOW)
    verify(t, KEYS.get, now=NOW + 60 + 29, skew_s=30)  # expired 29 s ago: within the skew
    assert _reason(t, now=NOW + 60 + 30, skew_s=30) == "expired"
    assert _reason(t, now=NOW + 61, skew_s=0) == "expired"
    # Issued ahead of this clock: accepted within the skew, refused beyond it.
    verify(t, KEYS.get, now=NOW - 30, skew_s=30)
    assert _reason(t, now=NOW - 31, skew_s=30) == "not_yet_valid"


def test_tampering_is_a_bad_signature() -> None:
    t = mint(KEY_A, subject="user-42", permissions=["read"], ttl_s=900, now=NOW)
    head, body, sig = t.split(".")
    wider = _b64(json.dumps(_payload(sub="user-43")).encode())
    assert _reason(f"{head}.{wider}.{sig}") == "bad_signature"
    assert _reason(f"{head}.{body}.{_b64(b'x' * 32)}") == "bad_signature"
    assert _reason(f"{head}.{body}.") == "bad_signature"
    # Another secret under the same kid: a forgery.
    forged = _forge({"alg": "HS256", "kid": "a1"}, _payload(), tokens.decode_secret(SECRET_B))
    assert _reason(forged) == "bad_signature"
    # A non-canonical encoding of the same signature (other trailing bits) is refused too.
    last = sig[-1]
    other = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    twin = next(ch for ch in other if ch != last and other.index(ch) // 4 == other.index(last) // 4)
    assert _reason(f"{head}.{body}.{sig[:-1]}{twin}") == "bad_signature"


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "none", "kid": "a1"},
        {"alg": "HS512", "kid": "a1"},
        {"alg": "RS256", "kid": "a1"},
        {"alg": "HS256"},
        {"alg": "HS256", "kid": "a1", "jku": "http://evil"},
        {"alg": "HS256", "kid": "a1", "typ": "JOSE+JSON"},
    ],
)
def test_only_hs256_with_a_kid(header: dict[str, object]) -> None:
    assert _reason(_forge(header, _payload(), KEY_A.secret)) == "malformed"


def test_unknown_kid_and_other_tenants_key() -> None:
    assert _reason(_forge({"alg": "HS256", "kid": "zz"}, _payload(), KEY_A.secret)) == (
        "unknown_kid"
    )
    # Tenant b's key signing a token that claims tenant acme.
    b_for_a = _forge({"alg": "HS256", "kid": "b1"}, _payload(), KEY_B.secret)
    assert _reason(b_for_a) == "wrong_tenant"
    # Tenant b's own token verifies as tenant b's, whatever it is presented to.
    t = mint(KEY_B, subject="user-42", permissions=["read"], ttl_s=60, now=NOW)
    assert verify(t, KEYS.get, now=NOW).tenant == "other"


@pytest.mark.parametrize(
    "payload",
    [
        _payload(aud="other"),
        _payload(sub=""),
        _payload(sub=42),
        _payload(sub="a\x00b"),
        _payload(conv="a/b"),
        _payload(perm=["read", "admin"]),
        _payload(perm=[]),
        _payload(perm="read"),
        _payload(iat="1800000000"),
        _payload(exp=True),
        _payload(exp=NOW + 900.5),
    ],
)
def test_bad_claims_are_malformed(payload: dict[str, object]) -> None:
    assert _reason(_forge({"alg": "HS256", "kid": "a1"}, payload, KEY_A.secret)) == "malformed"


def test_lifetime_is_bounded() -> None:
    long = _forge({"alg": "HS256", "kid": "a1"}, _payload(exp=NOW + 86401), KEY_A.secret)
    assert _reason(long, max_ttl_s=86400) == "too_long_lived"
    backwards = _forge({"alg": "HS256", "kid": "a1"}, _payload(exp=NOW), KEY_A.secret)
    assert _reason(backwards) == "too_long_lived"
    with pytest.raises(ValueError, match="ttl"):
        mint(KEY_A, subject="u", permissions=["read"], ttl_s=86401, max_ttl_s=86400)
    with pytest.raises(ValueError, match="ttl"):
        mint(KEY_A, subject="u", permissions=["read"], ttl_s=0)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "abc",
        "a.b",
        "a.b.c.d",
        "eyJ!.e30.x",
        "e30.e30.",  # header {} has no alg
        _b64(b"[1]") + ".e30.",
        _b64(b'{"alg":"HS256","alg":"none","kid":"a1"}') + ".e30.",
        _b64(b'{"alg":"HS256","kid":NaN}') + ".e30.",
        "eyJ" + "A" * 5000 + ".e30.x",
    ],
)
def test_malformed(token: str) -> None:
    assert _reason(token) == "malformed"


def test_duplicate_claim_names_are_refused() -> None:
    head = _b64(json.dumps({"alg": "HS256", "kid": "a1"}).encode())
    body = _b64(
        b'{"aud":"gaama","tenant":"acme","sub":"u","sub":"v","perm":["read"],'
        b'"iat":1800000000,"exp":1800000900}'
    )
    sig = _b64(hmac.new(KEY_A.secret, f"{head}.{body}".encode(), hashlib.sha256).digest())
    assert _reason(f"{head}.{body}.{sig}") == "malformed"


def test_kid_rotation_and_disabling() -> None:
    old = SigningKey.from_text("a1", "acme", SECRET_A)
    new = SigningKey.from_text("a2", "acme", tokens.new_secret())
    t_old = mint(old, subject="u", permissions=["read"], ttl_s=600, now=NOW)
    t_new = mint(new, subject="u", permissions=["read"], ttl_s=600, now=NOW)
    both = {"a1": old, "a2": new}
    assert verify(t_old, both.get, now=NOW).kid == "a1"
    assert verify(t_new, both.get, now=NOW).kid == "a2"
    retired = {"a1": SigningKey("a1", "acme", old.secret, disabled=True), "a2": new}
    with pytest.raises(TokenError) as exc:
        verify(t_old, retired.get, now=NOW)
    assert exc.value.reason == "disabled_kid"
    assert verify(t_new, retired.get, now=NOW).kid == "a2"
    removed = {"a2": new}
    with pytest.raises(TokenError) as exc:
        verify(t_old, removed.get, now=NOW)
    assert exc.value.reason == "unknown_kid"
    with pytest.raises(ValueError, match="disabled"):
        mint(retired["a1"], subject="u", permissions=["read"], ttl_s=60)


def test_secrets_and_kids_are_checked() -> None:
    with pytest.raises(ValueError, match="at least 32"):
        SigningKey.from_text("k", "t", _b64(b"short"))
    with pytest.raises(ValueError, match="base64url"):
        SigningKey.from_text("k", "t", "not base64 + / at all")
    with pytest.raises(ValueError, match="kid"):
        SigningKey("bad kid", "t", b"x" * 32)
    assert repr(KEY_A.secret) not in repr(KEY_A) and "secret" not in repr(KEY_A)
    assert len(tokens.decode_secret(tokens.new_secret())) == 32


def test_scope_forcing() -> None:
    c = verify(
        mint(KEY_A, subject="u1", permissions=["read"], ttl_s=60, now=NOW), KEYS.get, now=NOW
    )
    assert c.scope(None, None) == ("u1", None)
    assert c.scope("u1", "chat") == ("u1", "chat")  # narrowing to one conversation is fine
    with pytest.raises(Forbidden):
        c.scope("u2", None)
    c.require("read")
    with pytest.raises(Forbidden, match="write"):
        c.require("write")
    bound = verify(
        mint(KEY_A, subject="u1", conversation="c1", permissions=["read"], ttl_s=60, now=NOW),
        KEYS.get,
        now=NOW,
    )
    assert bound.scope(None, None) == ("u1", "c1")
    with pytest.raises(Forbidden):
        bound.scope(None, "c2")
    assert bound.covers("u1", "c1") and not bound.covers("u1", "c2")
    assert not bound.covers("u2", "c1") and not c.covers("", "c1")


def test_sdk_mint_token_verifies() -> None:
    t = mint_token(SECRET_A, kid="a1", tenant="acme", subject="u", permissions=["read", "forget"])
    c = verify(t, KEYS.get)
    assert c.permissions == {"read", "forget"} and c.expires_at - c.issued_at == 900


# --- key file and Authenticator -----------------------------------------------------------------


def _entry(kid: str, tenant: str, secret: str, **kw: object) -> dict[str, object]:
    return {"kid": kid, "tenant": tenant, "secret": secret, **kw}


def test_key_file_forms(tmp_path: Path) -> None:
    api = [{"key_sha256": hash_api_key("k"), "tenant": "acme"}]
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(api))
    assert load_keys(plain).signing_keys == [] and len(load_key_file(plain)) == 1
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"api_keys": api, "signing_keys": [_entry("a1", "acme", SECRET_A)]}))
    loaded = load_keys(both)
    assert [e.kid for e in loaded.signing_keys] == ["a1"] and len(loaded.api_keys) == 1
    assert loaded.signing_keys[0].signing_key().secret == KEY_A.secret
    assert SECRET_A not in repr(loaded)  # the secret is never printed
    for bad, needle in [
        ({"api_keys": api, "extra": 1}, "unknown field"),
        ({"signing_keys": [_entry("a1", "acme", "short")]}, "secret"),
        (
            {"signing_keys": [_entry("a1", "acme", SECRET_A), _entry("a1", "x", SECRET_B)]},
            "several signing keys with kid a1",
        ),
        ({"signing_keys": {"a1": SECRET_A}}, "expected a JSON list"),
    ]:
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=needle):
            load_keys(path)


def _auth(settings: Settings, path: Path, **update: object) -> Authenticator:
    s = settings.model_copy(update={"api_keys_file": str(path), "api_keys_reload_s": 0.1, **update})
    return Authenticator(s)


@pytest.fixture
def plain_settings() -> Settings:
    return Settings()


def test_authenticator_takes_tokens_and_rotates_without_restart(
    tmp_path: Path, plain_settings: Settings
) -> None:
    path = tmp_path / "keys.json"
    api = [{"key_sha256": hash_api_key("key-a"), "tenant": "acme"}]
    path.write_text(json.dumps({"api_keys": api, "signing_keys": [_entry("a1", "acme", SECRET_A)]}))
    auth = _auth(plain_settings, path)
    t1 = mint(KEY_A, subject="u1", permissions=["read"], ttl_s=600)
    who = auth.principal({"authorization": f"Bearer {t1}"}, "10.0.0.1")
    assert who.tenant == "acme" and who.token is not None and who.token.subject == "u1"
    assert who.key_id.startswith("token:a1:")
    assert auth.principal({"x-api-key": t1}, "10.0.0.1").token is not None
    key = auth.principal({"x-api-key": "key-a"}, "10.0.0.1")
    assert key.token is None and key.key_id == hash_api_key("key-a")[:12]

    # Add a2 beside a1, then retire a1: no restart.
    secret2 = tokens.new_secret()
    t2 = mint(
        SigningKey.from_text("a2", "acme", secret2), subject="u1", permissions=["read"], ttl_s=600
    )
    with pytest.raises(AuthError):
        auth.principal({"authorization": f"Bearer {t2}"}, "10.0.0.1")
    entries = [_entry("a1", "acme", SECRET_A), _entry("a2", "acme", secret2)]
    path.write_text(json.dumps({"api_keys": api, "signing_keys": entries}))
    os.utime(path, ns=(1, 10**18))
    auth.ring._checked = float("-inf")  # skip the reload interval
    assert auth.principal({"authorization": f"Bearer {t2}"}, "10.0.0.1").token is not None
    assert auth.principal({"authorization": f"Bearer {t1}"}, "10.0.0.1").token is not None
    entries[0]["disabled"] = True
    path.write_text(json.dumps({"api_keys": api, "signing_keys": entries}))
    os.utime(path, ns=(2, 2 * 10**18))
    auth.ring._checked = float("-inf")
    with pytest.raises(AuthError) as exc:
        auth.principal({"authorization": f"Bearer {t1}"}, "10.0.0.1")
    assert exc.value.status == 401 and "disabled" in exc.value.message
    assert auth.principal({"authorization": f"Bearer {t2}"}, "10.0.0.1").token is not None


def test_failed_tokens_count_towards_the_throttle(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"signing_keys": [_entry("a1", "acme", SECRET_A)]}))
    auth = _auth(Settings(auth_fail_limit=3), path)
    forged = _forge({"alg": "HS256", "kid": "a1"}, _payload(exp=2**40), KEY_B.secret)
    for _ in range(3):
        with pytest.raises(AuthError) as exc:
            auth.principal({"authorization": f"Bearer {forged}"}, "10.0.0.9")
        assert exc.value.status == 401 and "signature" in exc.value.message
    with pytest.raises(AuthError) as exc:
        auth.principal({"authorization": f"Bearer {forged}"}, "10.0.0.9")
    assert exc.value.status == 429
    # A valid token from the same address is still accepted.
    good = mint(KEY_A, subject="u1", permissions=["read"], ttl_s=60)
    assert auth.principal({"authorization": f"Bearer {good}"}, "10.0.0.9").tenant == "acme"


def test_expired_token_is_401(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"signing_keys": [_entry("a1", "acme", SECRET_A)]}))
    auth = _auth(Settings(token_clock_skew_s=5), path)
    old = mint(KEY_A, subject="u1", permissions=["read"], ttl_s=60, now=time.time() - 1000)
    with pytest.raises(AuthError) as exc:
        auth.principal({"authorization": f"Bearer {old}"}, "10.0.0.1")
    assert exc.value.status == 401 and "expired" in exc.value.message


def test_signing_keys_setting() -> None:
    s = Settings(signing_keys=[SigningKeyEntry(kid="a1", tenant="acme", secret=SECRET_A)])
    auth = Authenticator(s)
    t = mint(KEY_A, subject="u1", permissions=["read"], ttl_s=60)
    assert auth.principal({"authorization": f"Bearer {t}"}, "x").tenant == "acme"
    with pytest.raises(ValueError, match="several signing keys"):
        Settings(signing_keys=[_entry("a1", "acme", SECRET_A), _entry("a1", "b", SECRET_B)])


# --- gaama token ---------------------------------------------------------------------------------


def test_cli_keygen_mint_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in [v for v in os.environ if v.startswith("GAAMA_")]:
        monkeypatch.delenv(var)
    assert cli.main(["token", "keygen", "--tenant", "acme", "--kid", "acme-1"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["kid"] == "acme-1" and len(tokens.decode_secret(first["secret"])) == 32
    assert cli.main(["token", "keygen", "--tenant", "acme", "--kid", "acme-2"]) == 0
    second = json.loads(capsys.readouterr().out)
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"api_keys": [], "signing_keys": [first, second]}))
    monkeypatch.setenv("GAAMA_API_KEYS_FILE", str(path))

    argv = ["token", "mint", "--tenant", "acme", "--subject", "user/42", "--conversation", "c9"]
    assert cli.main([*argv, "--ttl", "900", "--perm", "read,write"]) == 0
    token = capsys.readouterr().out.strip()
    keys = {e["kid"]: SigningKey.from_text(e["kid"], "acme", e["secret"]) for e in (first, second)}
    c = verify(token, keys.get)
    assert c.kid == "acme-2"  # the newest key signs
    assert (c.subject, c.conversation, c.permissions) == ("user/42", "c9", {"read", "write"})
    assert cli.main(["token", "verify", token]) == 0
    assert json.loads(capsys.readouterr().out)["subject"] == "user/42"

    assert cli.main(["token", "mint", "--tenant", "acme", "--subject", "u", "--kid", "acme-1"]) == 0
    assert verify(capsys.readouterr().out.strip(), keys.get).kid == "acme-1"
    for bad, needle in [
        (["--tenant", "nobody", "--subject", "u"], "no enabled signing key"),
        (["--tenant", "acme", "--subject", "u", "--perm", "admin"], "permissions"),
        (["--tenant", "acme", "--subject", "u", "--ttl", "999999"], "ttl"),
        (["--tenant", "acme", "--subject", ""], "subject"),
    ]:
        assert cli.main(["token", "mint", *bad]) == 2
        assert needle in capsys.readouterr().err
    assert cli.main(["token", "verify", token[:-2] + "xx"]) == 2
    assert "bad_signature" in capsys.readouterr().err


def test_a_failed_key_file_reload_is_counted_and_keeps_the_keys(
    tmp_path: Path, plain_settings: Settings
) -> None:
    from prometheus_client import CollectorRegistry

    from gaama.metrics import key_reload_metric

    path = tmp_path / "keys.json"
    path.write_text(json.dumps([{"key_sha256": hash_api_key("key-a"), "tenant": "acme"}]))
    registry = CollectorRegistry()
    failures = key_reload_metric("query", registry)
    s = plain_settings.model_copy(update={"api_keys_file": str(path), "api_keys_reload_s": 0.01})
    auth = Authenticator(s, failures)
    name = "gaama_query_api_keys_reload_failures_total"
    assert registry.get_sample_value(name) == 0
    path.write_text("{not json")
    time.sleep(0.05)
    assert auth.principal({"x-api-key": "key-a"}, "10.0.0.1").tenant == "acme"  # kept
    assert registry.get_sample_value(name) == 1
