"""How the services authenticate to Kafka and Redis (``GAAMA_KAFKA__*``, ``GAAMA_REDIS__*``).

Both are plain settings: the Kafka wiring (``services.runtime.kafka``) turns
:class:`KafkaConnection` into client arguments, :func:`gaama.store.connect` takes
:class:`RedisConnection`'s :meth:`~RedisConnection.client_options`. Every secret can be given
inline or as a file (``*_FILE``: a mounted Kubernetes Secret), read once at start-up; files that
are named must exist, so a wrong mount fails the start, naming the variable.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


def read_secret(path: Path, var: str) -> SecretStr:
    """The content of a secret file, without its trailing newline.

    Raises:
        ValueError: naming ``var`` when the file cannot be read or is empty.
    """
    try:
        text = path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{var} {str(path)!r}: {exc}") from None
    if not text:
        raise ValueError(f"{var} {str(path)!r} is empty")
    return SecretStr(text)


def _file_secret(inline: SecretStr | None, path: Path | None, var: str) -> SecretStr | None:
    if path is None:
        return inline
    if inline is not None:
        raise ValueError(f"set {var} or {var}_FILE, not both")
    return read_secret(path, f"{var}_FILE")


def _check_files(owner: BaseModel, prefix: str, names: tuple[str, ...]) -> None:
    for name in names:
        path = getattr(owner, name)
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{prefix}{name.upper()} {str(path)!r}: no such file")


class KafkaConnection(BaseModel):
    """Security of every Kafka client of a service (``GAAMA_KAFKA__*``): the faust app, the
    producers, the admin client and the lag reader all take these."""

    model_config = ConfigDict(extra="forbid")

    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    # OAUTHBEARER: a Python callable "module:function" returning the access token (str, or a
    # (token, expiry) tuple), sync or async; called whenever a connection authenticates.
    oauth_token_provider: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    # TLS (SSL, SASL_SSL): the CA bundle that signs the brokers' certificates (None: the
    # system's), the client certificate and key for mutual TLS, and the key's password.
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_key_password_file: Path | None = None
    # Whether the broker's certificate must name the host connected to.
    ssl_check_hostname: bool = True

    @field_validator(
        "sasl_username",
        "sasl_password",
        "sasl_password_file",
        "oauth_token_provider",
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_key_password",
        "ssl_key_password_file",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        return None if v == "" else v

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConnection:
        p = "GAAMA_KAFKA__"
        self.sasl_password = _file_secret(
            self.sasl_password, self.sasl_password_file, f"{p}SASL_PASSWORD"
        )
        self.sasl_password_file = None
        self.ssl_key_password = _file_secret(
            self.ssl_key_password, self.ssl_key_password_file, f"{p}SSL_KEY_PASSWORD"
        )
        self.ssl_key_password_file = None
        _check_files(self, p, ("ssl_cafile", "ssl_certfile", "ssl_keyfile"))
        if self.sasl:
            if self.sasl_mechanism == "OAUTHBEARER":
                if not self.oauth_token_provider:
                    raise ValueError(
                        f"{p}SASL_MECHANISM=OAUTHBEARER needs {p}OAUTH_TOKEN_PROVIDER "
                        "(module:function returning a token)"
                    )
            elif not self.sasl_username or self.sasl_password is None:
                raise ValueError(
                    f"{p}SASL_MECHANISM={self.sasl_mechanism} needs {p}SASL_USERNAME and "
                    f"{p}SASL_PASSWORD (or {p}SASL_PASSWORD_FILE)"
                )
        elif self.sasl_username or self.sasl_password or self.oauth_token_provider:
            raise ValueError(
                f"SASL credentials are set but {p}SECURITY_PROTOCOL={self.security_protocol}; "
                "use SASL_SSL or SASL_PLAINTEXT"
            )
        tls_files = self.ssl_cafile or self.ssl_certfile or self.ssl_keyfile
        if tls_files and not self.tls:
            raise ValueError(
                f"TLS files are set but {p}SECURITY_PROTOCOL={self.security_protocol}; "
                "use SSL or SASL_SSL"
            )
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError(f"{p}SSL_KEYFILE is set without {p}SSL_CERTFILE")
        return self

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (None without TLS): the configured CA or the system's,
        the client certificate when set, hostname checks as configured."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=str(self.ssl_cafile) if self.ssl_cafile else None)
        ctx.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile:
            password = self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
            ctx.load_cert_chain(
                str(self.ssl_certfile),
                str(self.ssl_keyfile) if self.ssl_keyfile else None,
                password=password,
            )
        return ctx


class RedisConnection(BaseModel):
    """Authentication and TLS of the Redis clients (``GAAMA_REDIS__*``), on one server or a
    cluster. TLS itself is chosen by the URL's scheme (``rediss://``)."""

    model_config = ConfigDict(extra="forbid")

    # ACL user (None: "default") and password; they win over any in GAAMA_REDIS_URL.
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    ssl_ca_certs: Path | None = None  # None: the system's CA bundle
    ssl_certfile: Path | None = None  # client certificate (mutual TLS)
    ssl_keyfile: Path | None = None
    ssl_check_hostname: bool = True

    @field_validator(
        "username",
        "password",
        "password_file",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        return None if v == "" else v

    @model_validator(mode="after")
    def _consistent(self) -> RedisConnection:
        p = "GAAMA_REDIS__"
        self.password = _file_secret(self.password, self.password_file, f"{p}PASSWORD")
        self.password_file = None
        _check_files(self, p, ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"))
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError(f"{p}SSL_KEYFILE is set without {p}SSL_CERTFILE")
        return self

    @property
    def tls_files(self) -> bool:
        return bool(self.ssl_ca_certs or self.ssl_certfile or self.ssl_keyfile)

    def client_options(self, url: str) -> dict[str, Any]:
        """redis-py keyword arguments for a client of ``url`` (TLS ones only for rediss://)."""
        options: dict[str, Any] = {}
        if self.username:
            options["username"] = self.username
        if self.password is not None:
            options["password"] = self.password.get_secret_value()
        if url.startswith("rediss://"):
            options["ssl_check_hostname"] = self.ssl_check_hostname
            options["ssl_cert_reqs"] = "required"
            if self.ssl_ca_certs:
                options["ssl_ca_certs"] = str(self.ssl_ca_certs)
            if self.ssl_certfile:
                options["ssl_certfile"] = str(self.ssl_certfile)
            if self.ssl_keyfile:
                options["ssl_keyfile"] = str(self.ssl_keyfile)
        return options
