"""Kafka and Redis connection settings: validated at start-up naming the variable, secrets
read from files, and turned into the clients' arguments."""

from __future__ import annotations

import ssl
from pathlib import Path

import faust
import pytest
from aiokafka.abc import AbstractTokenProvider

from gaama.config import load_settings
from gaama.errors import ConfigError
from gaama.launch import settings_env
from services.runtime import salvage
from services.runtime.kafka import client_options, faust_credentials, load_callable
from tests.support.certs import make_certs


def token_for_tests() -> str:
    return "token-1"


async def async_token_for_tests() -> tuple[str, int]:
    return "token-2", 123


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    p = tmp_path / "password"
    p.write_text("s3cret\n")
    return p


def test_secrets_come_from_files_named_by_environment(
    monkeypatch: pytest.MonkeyPatch, secret: Path
) -> None:
    monkeypatch.setenv("GAAMA_KAFKA__SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("GAAMA_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("GAAMA_KAFKA__SASL_USERNAME", "gaama")
    monkeypatch.setenv("GAAMA_KAFKA__SASL_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("GAAMA_REDIS__USERNAME", "svc")
    monkeypatch.setenv("GAAMA_REDIS__PASSWORD_FILE", str(secret))
    s = load_settings()
    assert s.kafka.sasl_password is not None
    assert s.kafka.sasl_password.get_secret_value() == "s3cret"  # trailing newline dropped
    opts = client_options(s.kafka)
    assert opts == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "gaama",
        "sasl_plain_password": "s3cret",
    }
    creds = faust_credentials(s.kafka)
    assert isinstance(creds, faust.SASLCredentials)
    assert creds.mechanism.value == "SCRAM-SHA-512" and creds.password == "s3cret"
    assert s.redis.client_options(s.redis_url) == {"username": "svc", "password": "s3cret"}
    # A child process gets the same settings (the secret in clear, the file not needed).
    env = settings_env(s)
    assert env["GAAMA_KAFKA__SASL_PASSWORD"] == "s3cret"
    assert env["GAAMA_REDIS__PASSWORD"] == "s3cret"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"GAAMA_KAFKA__SECURITY_PROTOCOL": "SASL_SSL"},
            "GAAMA_KAFKA__SASL_MECHANISM=PLAIN needs GAAMA_KAFKA__SASL_USERNAME",
        ),
        (
            {"GAAMA_KAFKA__SECURITY_PROTOCOL": "TLS"},
            "GAAMA_KAFKA__SECURITY_PROTOCOL",
        ),
        (
            {"GAAMA_KAFKA__SASL_USERNAME": "u", "GAAMA_KAFKA__SASL_PASSWORD": "p"},
            "SASL credentials are set but GAAMA_KAFKA__SECURITY_PROTOCOL=PLAINTEXT",
        ),
        (
            {
                "GAAMA_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
                "GAAMA_KAFKA__SASL_MECHANISM": "OAUTHBEARER",
            },
            "needs GAAMA_KAFKA__OAUTH_TOKEN_PROVIDER",
        ),
        (
            {
                "GAAMA_KAFKA__SECURITY_PROTOCOL": "SSL",
                "GAAMA_KAFKA__SSL_CAFILE": "/nonexistent/ca.pem",
            },
            "GAAMA_KAFKA__SSL_CAFILE '/nonexistent/ca.pem': no such file",
        ),
        (
            {
                "GAAMA_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "GAAMA_KAFKA__SASL_USERNAME": "u",
                "GAAMA_KAFKA__SASL_PASSWORD_FILE": "/nonexistent/pw",
            },
            "GAAMA_KAFKA__SASL_PASSWORD_FILE '/nonexistent/pw'",
        ),
        (
            {"GAAMA_REDIS__SSL_CA_CERTS": "__CA__"},
            "GAAMA_REDIS_URL is not rediss://",
        ),
        ({"GAAMA_CONSUMER_SESSION_TIMEOUT_S": "5"}, "GAAMA_CONSUMER_SESSION_TIMEOUT_S"),
        ({"GAAMA_CONSUMER_SESSION_TIMEOUT_S": "1801"}, "GAAMA_CONSUMER_SESSION_TIMEOUT_S"),
    ],
)
def test_invalid_connection_settings_fail_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], message: str
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    for k, v in env.items():
        monkeypatch.setenv(k, v.replace("__CA__", str(ca)))
    with pytest.raises(ConfigError, match="invalid configuration") as err:
        load_settings()
    assert message in str(err.value)


def test_session_timeout_bounds_are_kafkas_group_defaults() -> None:
    # group.min.session.timeout.ms = 6 s and group.max.session.timeout.ms = 30 min.
    assert load_settings(consumer_session_timeout_s=6).consumer_session_timeout_s == 6
    assert load_settings(consumer_session_timeout_s=1800).consumer_session_timeout_s == 1800


def test_tls_context_checks_the_broker_and_presents_the_client_cert(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    s = load_settings(
        kafka={
            "security_protocol": "SSL",
            "ssl_cafile": str(certs.ca),
            "ssl_certfile": str(certs.client_cert),
            "ssl_keyfile": str(certs.client_key),
        }
    )
    ctx = client_options(s.kafka)["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    assert isinstance(faust_credentials(s.kafka), faust.SSLCredentials)
    off = load_settings(
        kafka={"security_protocol": "SSL", "ssl_cafile": str(certs.ca), "ssl_check_hostname": False}
    )
    assert not client_options(off.kafka)["ssl_context"].check_hostname
    assert faust_credentials(load_settings().kafka) is None
    assert client_options(load_settings().kafka) == {"security_protocol": "PLAINTEXT"}


async def test_oauth_token_provider_hook_sync_and_async() -> None:
    for spec, token in [
        ("tests.unit.test_connections:token_for_tests", "token-1"),
        ("tests.unit.test_connections:async_token_for_tests", "token-2"),
    ]:
        s = load_settings(
            kafka={
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "OAUTHBEARER",
                "oauth_token_provider": spec,
            }
        )
        provider = client_options(s.kafka)["sasl_oauth_token_provider"]
        assert isinstance(provider, AbstractTokenProvider)
        assert await provider.token() == token
        assert isinstance(faust_credentials(s.kafka), faust.OAuthCredentials)
    with pytest.raises(ConfigError, match=r"GAAMA_KAFKA__OAUTH_TOKEN_PROVIDER 'nope\.mod:f'"):
        load_callable("nope.mod:f", "GAAMA_KAFKA__OAUTH_TOKEN_PROVIDER")
    with pytest.raises(ConfigError, match="invalid configuration"):
        load_settings(
            kafka={
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "OAUTHBEARER",
                "oauth_token_provider": "not a callable spec",
            }
        )


def test_redis_tls_options_only_for_rediss(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    s = load_settings(
        redis_url="rediss://127.0.0.1:6390/0",
        redis={
            "username": "svc",
            "password": "pw",
            "ssl_ca_certs": str(certs.ca),
            "ssl_certfile": str(certs.client_cert),
            "ssl_keyfile": str(certs.client_key),
        },
    )
    opts = s.redis.client_options(s.redis_url)
    assert opts["ssl_ca_certs"] == str(certs.ca) and opts["ssl_cert_reqs"] == "required"
    assert opts["ssl_check_hostname"] is True and opts["username"] == "svc"
    assert "ssl_ca_certs" not in s.redis.client_options("redis://127.0.0.1:6390/0")


def test_salvage_replaces_what_aiokafka_builds_fetch_results_from() -> None:
    """The salvage of undecodable batches replaces two names of aiokafka's fetcher; if aiokafka
    renames or reshapes them, this fails instead of the salvage silently doing nothing."""
    import inspect

    import aiokafka.consumer.fetcher as fetcher

    source = inspect.getsource(fetcher.Fetcher)
    assert "MemoryRecords(part_data[-1])" in source
    assert "PartitionRecords(" in source
    init = inspect.signature(fetcher.PartitionRecords.__init__).parameters
    assert list(init)[1:3] == ["tp", "records"]
    assert hasattr(fetcher.PartitionRecords, "_consumer_record")
    salvage.install()
    assert fetcher.MemoryRecords is salvage._RawMemoryRecords
    assert fetcher.PartitionRecords is salvage._SalvagingPartitionRecords
