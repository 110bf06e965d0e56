"""Graceful shutdown of the real services (processes): SIGTERM mid-stream ends ingest, extract,
reflect and query with exit code 0 within ``GAAMA_SHUTDOWN_GRACE_S``, a batch in hand is finished
or abandoned, and after a restart the graph equals a clean run's (nothing lost, nothing twice).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from gaama.config import Settings
from gaama.devstack import create_topics
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, encode
from gaama.store import connect
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex
from tests.fakes.openai_server import FakeOpenAIServer, slow
from tests.support.services import ServiceProcess, api_keys, produce, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

SAID = [
    "We moved the team offsite to Lisbon in March.",
    "The budget for the Lisbon offsite was twelve thousand euros.",
    "Priya will run the planning board from now on.",
    "Our release train ships every second Thursday.",
    "The mobile client is rewritten in Kotlin this quarter.",
    "Marco prefers tea to coffee and walks to work.",
]


def turns(tenant: str, sessions: int = 3) -> list[TurnReceived]:
    out = []
    for s in range(sessions):
        start = datetime(2024, 3, 1 + 7 * s, 9, 0, tzinfo=UTC)
        for i, text in enumerate(SAID):
            out.append(
                TurnReceived(
                    tenant=tenant,
                    conversation="standup",
                    turn_id=f"S{s}:{i}",
                    speaker=("Ann", "Bob")[i % 2],
                    text=f"{text} (session {s})",
                    timestamp=start + timedelta(minutes=i),
                    end_of_session=i == len(SAID) - 1,
                )
            )
    return out


TENANTS = ("acme", "globex")


async def send(settings: Settings, batch: list[TurnReceived]) -> None:
    await produce(
        settings.kafka_bootstrap,
        settings.topic_prefix + TOPIC_TURNS,
        [(conversation_key(t.tenant, t.conversation), encode(t)) for t in batch],
    )


def sigterm(proc: ServiceProcess) -> tuple[int, float]:
    """SIGTERM the service; its exit code and how long it took to exit."""
    assert proc.proc is not None
    started = time.monotonic()
    os.killpg(proc.proc.pid, signal.SIGTERM)
    code = proc.proc.wait(timeout=120)
    return code, time.monotonic() - started


async def snapshot(graph: GraphStore, tenant: str) -> tuple[set, set]:
    """Every node reachable from the tenant's episode chain (id, kind, chunk, text) and every
    edge between them."""
    seen: set[str] = set()
    frontier = list(await graph.chain(tenant, "standup"))
    nodes, edges = set(), set()
    while frontier:
        seen.update(frontier)
        got = await graph.get_nodes(tenant, frontier)
        nodes |= {(n.id, n.kind.value, str(n.extra.get("chunk")), n.text) for n in got.values()}
        adj = await graph.neighbours(tenant, frontier)
        nxt = set()
        for src, nbs in adj.items():
            for nb in nbs:
                edges.add((src, nb.node, nb.kind.value))
                if nb.node not in seen:
                    nxt.add(nb.node)
        frontier = sorted(nxt)
    return nodes, edges


async def settled(graph: GraphStore, episodes: int, reflections: bool) -> dict | None:
    """The per-tenant snapshots once every episode is chained and extracted (and each chunk
    reflected when asked) and nothing changed for a moment; None before."""
    snaps = {}
    for tenant in TENANTS:
        chain = await graph.chain(tenant, "standup")
        nodes = await graph.get_nodes(tenant, chain)
        if len(chain) != episodes or not all("chunk" in n.extra for n in nodes.values()):
            return None
        snaps[tenant] = await snapshot(graph, tenant)
        kinds = {k for _, k, _, _ in snaps[tenant][0]}
        if reflections and "reflection" not in {k.lower() for k in kinds}:
            return None
    await asyncio.sleep(3)
    again = {t: await snapshot(graph, t) for t in TENANTS}
    return snaps if again == snaps else None


def llm_env(llm: FakeOpenAIServer) -> dict[str, str]:
    # Chunks close at the end of each session only, never by the idle timer: boundaries then
    # depend on the turns alone, whatever the LLM's or the shutdown's timing.
    return {
        "GAAMA_CHUNK_IDLE_S": "600",
        "GAAMA_LLM_BASE_URL": llm.base_url,
        "GAAMA_LLM_MODEL": "fake-model",
        "GAAMA_LLM_API_KEY": "sk-test",
        "GAAMA_LLM_TIMEOUT_S": "60",
    }


def other_namespace(settings: Settings, suffix: str) -> Settings:
    return settings.model_copy(
        update={
            "key_prefix": settings.key_prefix + suffix,
            "index_name": settings.index_name + suffix,
            "topic_prefix": settings.topic_prefix.rstrip(".") + suffix + ".",
        }
    )


async def clean_run(settings: Settings, log: Path, llm: FakeOpenAIServer) -> dict:
    await create_topics(settings.kafka_bootstrap, settings.topic_partitions, settings.topic_prefix)
    client = connect(settings.redis_url, cluster=settings.redis_cluster)
    procs = [
        ServiceProcess(n, settings, log, **llm_env(llm)).start()
        for n in ("ingest", "extract", "reflect")
    ]
    try:
        for t in TENANTS:
            await send(settings, turns(t))
        graph = GraphStore(client, Keys(settings.key_prefix))
        return await wait_for(lambda: settled(graph, len(SAID) * 3, True), timeout=240)
    finally:
        for p in procs:
            p.stop()
        await VectorIndex(client, settings.index_name, settings.embed_dim).drop()
        await client.aclose()


async def test_sigterm_ingest_mid_stream_exits_in_grace_and_restart_loses_nothing(
    settings, topics, index, graph, tmp_path
):
    env = {"GAAMA_SHUTDOWN_GRACE_S": "10", "GAAMA_INGEST_BATCH": "8"}
    ingest = ServiceProcess("ingest", settings, tmp_path, **env).start()
    many = [
        t.model_copy(update={"turn_id": f"{t.turn_id}:{k}", "end_of_session": False})
        for k in range(10)
        for t in turns("acme")
    ]
    await send(settings, many)

    async def midway() -> bool:
        return 0 < len(await graph.chain("acme", "standup")) < len(many)

    await wait_for(midway, timeout=60, interval=0.05)
    code, took = sigterm(ingest)
    assert code == 0, ingest.log_tail()
    assert took < 10, f"ingest took {took:.1f}s to stop"
    assert len(await graph.chain("acme", "standup")) < len(many), "SIGTERM came too late"

    ingest = ServiceProcess("ingest", settings, tmp_path, **env).start()
    try:

        async def complete() -> bool:
            return len(await graph.chain("acme", "standup")) >= len(many)

        await wait_for(complete, timeout=120)
        await asyncio.sleep(1)
        chain = await graph.chain("acme", "standup")
    finally:
        ingest.stop()
    nodes = await graph.get_nodes("acme", chain)
    assert len(chain) == len(set(chain)) == len(many)  # nothing lost, nothing twice
    assert [nodes[e].turn_id for e in chain] == [t.turn_id for t in many]


async def test_sigterm_extract_and_reflect_mid_batch_then_restart_equals_a_clean_run(
    settings, topics, index, graph, tmp_path
):
    with FakeOpenAIServer() as llm:
        expected = await clean_run(other_namespace(settings, "c"), tmp_path, llm)
        llm.reset()
        env = llm_env(llm)
        ingest = ServiceProcess("ingest", settings, tmp_path, **env).start()
        try:
            # extract: the first extraction call outlasts a 10 s grace -> the batch is abandoned
            short = {**env, "GAAMA_SHUTDOWN_GRACE_S": "10"}
            llm.script(slow(60))
            extract = ServiceProcess("extract", settings, tmp_path, **short).start()
            for t in TENANTS:
                await send(settings, turns(t))
            await wait_for(lambda: _now(len(llm.chat_requests()) >= 1), timeout=60)
            code, took = sigterm(extract)
            assert code == 0, extract.log_tail()
            assert took < 10, f"extract took {took:.1f}s to stop with a 10 s grace"
            assert "abandoning" in extract.log_tail(200)

            extract = ServiceProcess("extract", settings, tmp_path, **env).start()
            episodes = len(SAID) * 3
            await wait_for(lambda: settled(graph, episodes, False), timeout=240)

            # reflect: its first call takes 3 s of a 20 s grace -> the batch is finished
            llm.reset()
            llm.script(slow(3))
            env20 = {**env, "GAAMA_SHUTDOWN_GRACE_S": "20"}
            reflect = ServiceProcess("reflect", settings, tmp_path, **env20).start()
            await wait_for(lambda: _now(len(llm.chat_requests()) >= 1), timeout=60)
            code, took = sigterm(reflect)
            assert code == 0, reflect.log_tail()
            assert 2 < took < 20, f"reflect took {took:.1f}s to stop"
            assert "abandoning" not in reflect.log_tail(200)

            reflect = ServiceProcess("reflect", settings, tmp_path, **env).start()
            got = await wait_for(lambda: settled(graph, episodes, True), timeout=240)
            extract.stop()
            reflect.stop()
        finally:
            ingest.stop()
    for tenant in TENANTS:
        assert got[tenant][0] == expected[tenant][0]  # nodes
        assert got[tenant][1] == expected[tenant][1]  # edges


async def _now(value: bool) -> bool:
    return value


async def test_sigterm_query_drains_the_request_in_flight(settings, index, tmp_path):
    with FakeOpenAIServer() as llm:
        llm.script(slow(3))
        env = {
            **llm_env(llm),
            "GAAMA_SHUTDOWN_GRACE_S": "20",
            "GAAMA_API_KEYS": json.dumps(api_keys(("k-acme", "acme"))),
        }
        query = ServiceProcess("query", settings, tmp_path, **env).start()
        async with httpx.AsyncClient(base_url=query.url, timeout=30) as http:
            answer = asyncio.create_task(
                http.post(
                    "/v1/answer",
                    json={"question": "Where was the offsite?"},
                    headers={"Authorization": "Bearer k-acme"},
                )
            )
            await wait_for(lambda: _now(len(llm.chat_requests()) >= 1), timeout=30)
            loop = asyncio.get_running_loop()
            code, took = await loop.run_in_executor(None, sigterm, query)
            response = await answer
    assert response.status_code == 200, response.text
    assert code == 0, query.log_tail()
    assert 2 < took < 20, f"query took {took:.1f}s to stop"
