"""The memory explorer in a real browser (Debian's Chromium, headless, driven by Playwright)
against the real query service and Redis: search a scope, read score parts, follow provenance
and neighbours; memory text is shown as text, never run; a credential sees only its tenant;
the page is off unless GAAMA_EXPLORER is set."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from gaama import ids
from gaama.config import ApiKey, Settings, hash_api_key
from gaama.embed import MiniLMEmbedder
from gaama.model import Node, NodeKind
from gaama.store.graph import GraphStore
from gaama.store.vectors import VectorIndex
from tests.integration.test_query_api import make_app, with_keys
from tests.integration.test_search import build_memory
from tests.support.services import ServiceProcess

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

KEY_A, KEY_B = "explorer-key-a", "explorer-key-b"
HOSTILE = 'Caroline: my pottery <img src=x onerror="window.__pwned=1"> teacher is great'


def chromium() -> str:
    exe = os.environ.get("GAAMA_CHROMIUM") or shutil.which("chromium")
    if not exe:
        pytest.fail("chromium not found: run scripts/install-chromium.sh (make test does)")
    return exe


async def test_the_explorer_is_off_unless_enabled(
    settings: Settings, graph: GraphStore, index: VectorIndex, embedder: MiniLMEmbedder
) -> None:
    off, _ = make_app(with_keys(settings), graph, index, embedder)
    on, _ = make_app(with_keys(settings, explorer=True), graph, index, embedder)
    async with off, on:
        assert (await off.get("/explorer")).status_code == 404
        assert (await off.get("/explorer/explorer.js")).status_code == 404
        page = await on.get("/explorer")
        assert page.status_code == 200 and "GAAMA memory explorer" in page.text
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        js = await on.get("/explorer/explorer.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in js.text  # memory text is written with textContent only
        assert (await on.get("/explorer/other.js")).status_code == 404
        assert (await on.get("/explorer/..%2Fapp.py")).status_code == 404


async def test_search_provenance_and_neighbours_in_a_browser(
    settings: Settings,
    graph: GraphStore,
    index: VectorIndex,
    embedder: MiniLMEmbedder,
    tmp_path: Path,
) -> None:
    from playwright.async_api import async_playwright

    await build_memory(graph, embedder, "tenant-a")
    [vec] = await embedder.embed([HOSTILE])
    hostile = ids.episode_id("tenant-a", "conv9", "X:1")
    assert await graph.append_episode(
        Node(
            id=hostile,
            tenant="tenant-a",
            kind=NodeKind.EPISODE,
            text=HOSTILE,
            time=1683540000.0,
            conversation="conv9",
            subject="Caroline",
            turn_id="X:1",
            speaker="Caroline",
            vector=vec.tolist(),
        )
    )
    s = settings.model_copy(
        update={
            "api_keys": [
                ApiKey(key_sha256=hash_api_key(KEY_A), tenant="tenant-a"),
                ApiKey(key_sha256=hash_api_key(KEY_B), tenant="tenant-b"),
            ]
        }
    )
    query = ServiceProcess("query", s, tmp_path, GAAMA_EXPLORER="true").start()
    try:
        async with httpx.AsyncClient(base_url=query.url) as c:
            assert (await c.get("/explorer")).status_code == 200
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(f"{query.url}/explorer")

            # No credential yet: the page says so and reads nothing.
            await page.fill("#query", "pottery class")
            await page.click("#search button[type=submit]")
            await page.wait_for_selector("#status.error")
            assert "key or token" in await page.text_content("#status")

            await page.fill("#credential", KEY_A)
            await page.click("#auth button")
            await page.click("#search button[type=submit]")
            await page.wait_for_selector("#results tbody tr")
            rows = page.locator("#results tbody tr")
            texts = await rows.locator("td:nth-child(3)").all_text_contents()
            assert any("pottery" in t for t in texts)
            first = rows.first
            sim, ppr, score = [
                float(await first.locator(f"td:nth-child({i})").inner_text()) for i in (4, 5, 6)
            ]
            assert 0 < sim <= 1 and ppr >= 0 and score > 0

            # The hostile turn is listed as text and its markup never ran.
            assert HOSTILE in texts
            assert await page.evaluate("window.__pwned") is None
            assert await page.locator("#results img").count() == 0

            # A fact: its provenance down to the turns, and its neighbours.
            fact_row = rows.filter(has=page.locator("td.kind", has_text="fact")).first
            await fact_row.click()
            await page.wait_for_selector("#node h2:has-text('Derived from')")
            source = page.locator("#node ul a.node").first
            source_id = await source.text_content()
            assert source_id and source_id.startswith("ep_")
            assert await page.locator("#neighbours tr").count() > 1
            await page.screenshot(path=str(tmp_path / "explorer.png"), full_page=True)
            shot = os.environ.get("GAAMA_EXPLORER_SCREENSHOT")
            if shot:
                shutil.copy(tmp_path / "explorer.png", shot)
            await source.click()
            await page.wait_for_selector(f"#node dd:has-text('{source_id}')")
            assert "episode" in await page.text_content("#node")

            # Another tenant's key in the same page sees none of tenant-a's memory.
            await page.fill("#credential", KEY_B)
            await page.click("#auth button")
            await page.click("#search button[type=submit]")
            await page.wait_for_selector("#status:text-matches('^0 ranked')")
            assert await page.locator("#results tbody tr").count() == 0
            r = await page.evaluate(
                """async (id) => (await fetch('/v1/nodes/' + id, {headers: {Authorization:
                'Bearer ' + sessionStorage.getItem('gaama-explorer-credential')}})).status""",
                hostile,
            )
            assert r == 404
            assert errors == []
            await browser.close()
    finally:
        query.stop()
