"""The memory explorer: a static page the query service serves at ``/explorer`` when
``GAAMA_EXPLORER`` is on, for the people who answer "why did the agent say that?".

The page holds no data. It asks the caller for a key or an end-user token, keeps it in the
tab's session storage only, and makes every read through the same API as any client
(``/v1/search``, ``/v1/nodes/{id}``, ``/v1/forget/{id}``, ``/v1/audit``), so it sees exactly
what that credential may see. Memory text is untrusted: the script writes it with
``textContent`` only, and the Content-Security-Policy admits no inline script and no other
origin.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

#: The page's files and their media types.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "explorer.js": "text/javascript; charset=utf-8",
    "explorer.css": "text/css; charset=utf-8",
}

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def register_explorer(app: FastAPI) -> None:
    """Serve the explorer's page at ``/explorer`` and its files under ``/explorer/``."""
    pages = {name: _read(name) for name in FILES}

    @app.get("/explorer", include_in_schema=False)
    async def explorer_page() -> Response:
        return Response(pages["index.html"], media_type=FILES["index.html"], headers=HEADERS)

    @app.get("/explorer/{name}", include_in_schema=False)
    async def explorer_file(name: str) -> Response:
        if name not in pages:
            return Response(b'{"error": "not found"}', 404, media_type="application/json")
        return Response(pages[name], media_type=FILES[name], headers=HEADERS)
