"""Settings of the MCP gateway (``GAAMA_*``), apart from the core's: the gateway reaches the
stack only through the REST API, so it needs where that API is and, over stdio, whose key to use.

Built once in ``main()``; a missing or invalid value fails at start-up naming the variable.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gaama.config import API_KEY_MAX
from gaama.errors import ConfigError

Transport = Literal["stdio", "http"]


class McpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GAAMA_", extra="ignore", validate_default=True)

    #: The caller's own API key: stdio only (one desktop user, one tenant). Over HTTP every
    #: request brings its key and this is never used.
    api_key: SecretStr | None = None
    #: The query service (search, answer, nodes, memories, forgetting).
    query_url: str = "http://127.0.0.1:8084"
    #: The ingest service (``POST /v1/turns``).
    ingest_url: str = "http://127.0.0.1:8081"
    #: Port of the streamable HTTP transport (``/mcp``, ``/metrics``, ``/healthz``, ``/readyz``).
    mcp_port: int = Field(8085, ge=1, le=65535)
    #: Seconds per REST call a tool makes.
    mcp_timeout_s: float = Field(30.0, gt=0, le=600)
    #: How long ``forget`` waits for the removal to finish before answering "pending".
    mcp_forget_wait_s: float = Field(3.0, ge=0, le=60)

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        return None if v == "" else v

    @field_validator("api_key")
    @classmethod
    def _key_length(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) > API_KEY_MAX:
            raise ValueError(f"longer than {API_KEY_MAX} characters; the API would refuse it")
        return v

    @field_validator("query_url", "ingest_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        v = v.strip()
        if not v.startswith(("http://", "https://")) or len(v) <= len("https://"):
            raise ValueError(f"must be an http:// or https:// URL, got {v[:100]!r}")
        return v.rstrip("/")


def load_mcp_settings(transport: Transport, **overrides: object) -> McpSettings:
    """The gateway's settings for ``transport``; :class:`ConfigError` naming each bad variable.

    Over stdio ``GAAMA_API_KEY`` is required: the server acts for one user, with that user's key.
    """
    try:
        s = McpSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = [
            f"GAAMA_{'__'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        ]
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
    if transport == "stdio" and s.api_key is None:
        raise ConfigError(
            "GAAMA_API_KEY is not set: the stdio MCP server acts for one tenant and needs that "
            "tenant's API key (the key the REST API takes); also set GAAMA_QUERY_URL and "
            "GAAMA_INGEST_URL unless the services run on 127.0.0.1:8084 and :8081"
        )
    return s
