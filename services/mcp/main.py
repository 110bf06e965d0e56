"""Start the MCP gateway: ``python -m services.mcp.main`` (streamable HTTP) or
``python -m services.mcp.main --stdio`` (what ``gaama mcp`` runs for a desktop host).

HTTP serves ``/mcp`` on ``GAAMA_HTTP_HOST:GAAMA_MCP_PORT``; it checks API keys against
``GAAMA_API_KEYS`` / ``GAAMA_API_KEYS_FILE`` (the query service's keys) and forwards them.
stdio acts for the one user whose key is ``GAAMA_API_KEY``. Both reach the stack only through
the REST API at ``GAAMA_QUERY_URL`` and ``GAAMA_INGEST_URL``. Stateless: run as many HTTP
replicas as the load needs.
"""

from __future__ import annotations

import argparse
import logging
import sys

import anyio
import uvicorn
from prometheus_client import CollectorRegistry

from gaama.config import Settings, load_settings
from gaama.errors import ConfigError, GaamaError
from gaama.metrics import mcp_metrics
from services.mcp.app import TOOLS, Gateway, build_server, create_http_app
from services.mcp.settings import load_mcp_settings
from services.runtime import logformat
from services.runtime import tracing as trace_context

log = logging.getLogger("gaama.mcp")


def check_http_keys(settings: Settings) -> None:
    """The HTTP transport refuses unknown keys itself (see ``app.ApiKeyGate``), so it needs the
    deployment's keys; without them every request would be refused."""
    if not settings.api_keys and not settings.api_keys_file and not settings.signing_keys:
        raise ConfigError(
            "GAAMA_API_KEYS, GAAMA_API_KEYS_FILE and GAAMA_SIGNING_KEYS are all unset: the MCP "
            "HTTP transport checks each request's API key or token before forwarding it, so "
            "give it the same keys as the query service"
        )


def run_stdio() -> int:
    mcp = load_mcp_settings("stdio")
    assert mcp.api_key is not None
    gw = Gateway(
        mcp,
        mcp_metrics(CollectorRegistry(), TOOLS),
        fixed_key=mcp.api_key.get_secret_value(),
    )
    server = build_server(gw)

    async def serve() -> None:
        try:
            await server.run_stdio_async()
        finally:
            await gw.aclose()

    anyio.run(serve)
    return 0


def run_http() -> int:
    settings = load_settings()
    trace_context.start("mcp", settings)
    check_http_keys(settings)
    mcp = load_mcp_settings("http")
    if mcp.api_key is not None:
        log.warning("GAAMA_API_KEY is ignored over HTTP: each request's own key is forwarded")
    registry = CollectorRegistry()
    gw = Gateway(mcp, mcp_metrics(registry, TOOLS))
    app = create_http_app(build_server(gw), gw, settings, registry)
    log.info(
        "MCP gateway on %s:%d/mcp → query %s, ingest %s",
        settings.http_host,
        mcp.mcp_port,
        mcp.query_url,
        mcp.ingest_url,
    )
    config = uvicorn.Config(
        app,
        host=settings.http_host,
        port=mcp.mcp_port,
        log_level="info",
        log_config=logformat.uvicorn_log_config(settings),
    )
    uvicorn.Server(config).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m services.mcp.main", description=__doc__)
    p.add_argument("--stdio", action="store_true", help="serve one client over stdin/stdout")
    args = p.parse_args(argv)
    # stdout is the protocol channel over stdio: logs go to stderr (basicConfig's default).
    logging.basicConfig(level=logging.INFO, format=logformat.TEXT_FORMAT)
    try:
        return run_stdio() if args.stdio else run_http()
    except GaamaError as exc:  # bad or missing config
        print(f"mcp: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
