"""Forgetting through the running pipeline: four real services, the real broker, a SIGKILL of the
extract and reflect workers right after the request, turns of the same conversation sent after
it; then zero residue in every key of the tenant and the other tenant untouched."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from gaama import ids
from gaama.config import ApiKey, Settings, hash_api_key
from gaama.events import TurnReceived
from gaama.store.graph import GraphStore
from tests.component.test_forget_cascade import dump, residue
from tests.integration.test_pipeline_e2e import TURNS, send, session
from tests.support.services import ServiceProcess, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

LATER = [
    ("Caroline", "Tomorrow I fly to Lisbon for a conference about marine biology."),
    ("Melanie", "Bring me a postcard from the aquarium there, please!"),
]


C2 = [
    ("Caroline", "I started learning the violin in March and practise every evening."),
    ("Melanie", "We adopted a grey cat called Pixel from the shelter on Sunday."),
    ("Caroline", "My brother runs a bakery in Porto that sells the best custard tarts."),
]


def turns(conv: str, lines, day: int, session: str) -> list[TurnReceived]:
    start = datetime(2023, 6, day, 9, 0, tzinfo=UTC)
    return [
        TurnReceived(
            tenant="acme",
            conversation=conv,
            turn_id=f"{session}:{i + 1}",
            speaker=speaker,
            text=text,
            timestamp=start + timedelta(minutes=i),
            end_of_session=i == len(lines) - 1,
        )
        for i, (speaker, text) in enumerate(lines)
    ]


async def settled(graph: GraphStore, tenant: str, conv: str, n: int) -> bool:
    chain = await graph.chain(tenant, conv)
    nodes = await graph.get_nodes(tenant, chain)
    return len(chain) == n and all("chunk" in x.extra for x in nodes.values())


async def quiet(graph: GraphStore, tenant: str) -> dict[str, object]:
    """The tenant's keys once reflection has finished with them (two equal dumps in a row)."""
    import asyncio

    last = await dump(graph, tenant)
    for _ in range(60):
        await asyncio.sleep(1.0)
        now = await dump(graph, tenant)
        if now == last:
            return now
        last = now
    raise AssertionError(f"{tenant}'s graph never settled")


#: Pipeline bookkeeping, not memory: the outbox drains as reflect handles the tenant's chunks,
#: and the text version changes with any write of the tenant's nodes.
_BOOKKEEPING = {"outbox", "outbox-index", "textver"}


def assert_kept(before: dict[str, object], after: dict[str, object]) -> None:
    """Nothing of ``before`` was removed or changed; the tenant's own pipeline may have added
    to it meanwhile (a late reflection and its edges) and moved on with its bookkeeping."""
    problems = []
    for key, value in before.items():
        if key.split(":")[1] == "state" and key.split(":")[3] in _BOOKKEEPING:
            continue
        now = after.get(key)
        if isinstance(value, dict) and isinstance(now, dict):
            degrees = key.split(":")[1] == "deg"  # a new edge raises a degree: keys must stay
            changed = [f for f, v in value.items() if f not in now or (now[f] != v and not degrees)]
            if changed:
                problems.append(f"{key}: {changed[:3]}")
        elif isinstance(value, list) and isinstance(now, list):
            if not set(value) <= set(now):
                problems.append(f"{key}: lost members")
        elif now != value:
            problems.append(f"{key}: removed or changed")
    assert not problems, problems[:10]


async def test_forget_a_conversation_while_workers_die(
    settings: Settings, topics, index, graph: GraphStore, tmp_path: Path
) -> None:
    s = settings.model_copy(
        update={"api_keys": [ApiKey(key_sha256=hash_api_key("key-a"), tenant="acme")]}
    )
    procs = {n: ServiceProcess(n, s, tmp_path).start() for n in ("ingest", "extract", "reflect")}
    query = ServiceProcess("query", s, tmp_path).start()
    try:
        old = session("acme", "c1", 8, n_sessions=2)
        await send(s, old + turns("c2", C2, 1, "D1") + session("other", "c1", 8))
        for tenant, conv, n in (("acme", "c1", 12), ("acme", "c2", 3), ("other", "c1", 6)):
            await wait_for(lambda t=tenant, c=conv, k=n: settled(graph, t, c, k), timeout=120)
        before_other = await quiet(graph, "other")
        forgotten = [ids.episode_id("acme", "c1", t.turn_id) for t in old]

        async with httpx.AsyncClient(base_url=query.url, timeout=30) as c:
            headers = {"Authorization": "Bearer key-a"}
            r = await c.delete("/v1/conversations/c1", headers=headers)
            assert r.status_code == 202, r.text
            rid = r.json()["request_id"]
            # Crash the two workers that play a part in the request, then bring them back.
            procs["extract"].kill(signal.SIGKILL)
            procs["reflect"].kill(signal.SIGKILL)
            await send(s, turns("c1", LATER, 2, "D9"))  # the conversation id is reused at once
            procs["extract"] = ServiceProcess("extract", s, tmp_path).start()
            procs["reflect"] = ServiceProcess("reflect", s, tmp_path).start()

            async def done() -> dict | None:
                body = (await c.get(f"/v1/forget/{rid}", headers=headers)).json()
                return body if body["status"] == "done" else None

            status = await wait_for(done, timeout=180)
            assert status["removed"]["episode"] == 12, status
            await wait_for(lambda: settled(graph, "acme", "c1", len(LATER)), timeout=120)
            r = await c.post("/v1/search", headers=headers, json={"query": "support group"})
            shown = " ".join(i["text"] for i in r.json()["memory"] + r.json()["ranked"])
        assert "support group" not in shown.lower()
    finally:
        for p in (*procs.values(), query):
            p.stop()

    snapshot = await dump(graph, "acme")
    found = residue(snapshot, forgotten + [text for _, text in TURNS], [])
    assert found == [], found[:10]
    assert_kept(before_other, await dump(graph, "other"))
    kept = await graph.get_nodes("acme", await graph.chain("acme", "c1"))
    assert sorted(n.turn_id for n in kept.values()) == ["D9:1", "D9:2"]
    assert len(await graph.chain("acme", "c2")) == len(C2)
