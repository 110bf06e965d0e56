"""End to end through the real broker: turns → ingest → extract → reflect → Redis.

The services run as real processes; only the LLM is faked (a local OpenAI-compatible server
driven through the real ``openai`` client).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from gaama import ids
from gaama.config import Settings
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, encode
from gaama.model import EdgeKind, NodeKind
from gaama.store.chunks import ChunkStore
from gaama.store.graph import GraphStore
from tests.fakes.openai_server import FakeOpenAIServer, malformed, slow, status, truncated
from tests.support.services import ServiceProcess, produce, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

TURNS = [
    ("Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "That's great! I painted a lake sunrise last year, painting relaxes me."),
    ("Caroline", "I'm thinking about adopting a child; the agency interviews are next month."),
    ("Melanie", "My kids love camping. We went camping at the beach last week."),
    ("Caroline", "The support group helped me a lot with my transition."),
    ("Melanie", "Painting and pottery are my favourite hobbies; I took a pottery class."),
]


def session(tenant: str, conv: str, day: int, n_sessions: int = 1) -> list[TurnReceived]:
    out = []
    for s in range(n_sessions):
        start = datetime(2023, 5, day + 7 * s, 13, 0, tzinfo=UTC)
        for i, (speaker, text) in enumerate(TURNS):
            out.append(
                TurnReceived(
                    tenant=tenant,
                    conversation=conv,
                    turn_id=f"D{s + 1}:{i + 1}",
                    speaker=speaker,
                    text=text,
                    timestamp=start + timedelta(minutes=i),
                    end_of_session=i == len(TURNS) - 1,
                )
            )
    return out


async def send(settings: Settings, turns: list[TurnReceived]) -> None:
    await produce(
        settings.kafka_bootstrap,
        settings.topic_prefix + TOPIC_TURNS,
        [(conversation_key(t.tenant, t.conversation), encode(t)) for t in turns],
    )


async def send_secured(settings: Settings, turns: list[TurnReceived]) -> None:
    """``send`` with the Kafka security settings of ``settings``."""
    from services.runtime.kafka import client_options

    await produce(
        settings.kafka_bootstrap,
        settings.topic_prefix + TOPIC_TURNS,
        [(conversation_key(t.tenant, t.conversation), encode(t)) for t in turns],
        **client_options(settings.kafka),
    )


async def graph_summary(graph: GraphStore, tenant: str, conv: str) -> dict:
    chain = await graph.chain(tenant, conv)
    adj = await graph.neighbours(tenant, chain)
    facts = {n.node for lst in adj.values() for n in lst if n.kind is EdgeKind.DERIVED_FROM}
    concepts = {n.node for lst in adj.values() for n in lst if n.kind is EdgeKind.HAS_CONCEPT}
    fadj = await graph.neighbours(tenant, list(facts))
    refl = {n.node for lst in fadj.values() for n in lst if n.kind is EdgeKind.DERIVED_FROM_FACT}
    kinds = {n.kind for d in (adj, fadj) for lst in d.values() for n in lst}
    marked = await graph.get_nodes(tenant, chain)
    return {
        "episodes": chain,
        "facts": facts,
        "concepts": concepts,
        "reflections": refl,
        "edge_kinds": kinds,
        "extracted": sum("chunk" in n.extra for n in marked.values()),
    }


@pytest.fixture
def services(settings: Settings, topics, index, tmp_path: Path) -> Iterator[dict]:
    procs = {"ingest": ServiceProcess("ingest", settings, tmp_path).start()}
    yield procs
    for p in procs.values():
        p.stop()


async def test_offline_pipeline_end_to_end_with_provenance(settings, services, graph, tmp_path):
    extract = ServiceProcess("extract", settings, tmp_path).start()
    reflect = ServiceProcess("reflect", settings, tmp_path).start()
    try:
        turns = session("acme", "conv-1", 8, n_sessions=2)
        await send(settings, turns)

        async def complete():
            s = await graph_summary(graph, "acme", "conv-1")
            return s if s["extracted"] == len(turns) and s["reflections"] else None

        summary = await wait_for(complete, timeout=120)
    finally:
        extract.stop()
        reflect.stop()
    assert summary["edge_kinds"] == {
        EdgeKind.NEXT,
        EdgeKind.DERIVED_FROM,
        EdgeKind.HAS_CONCEPT,
        EdgeKind.ABOUT_CONCEPT,
        EdgeKind.DERIVED_FROM_FACT,
    }
    turn_of = {ids.episode_id("acme", "conv-1", t.turn_id): t for t in turns}
    assert summary["episodes"] == list(turn_of)
    facts = await graph.get_nodes("acme", list(summary["facts"]))
    fadj = await graph.neighbours("acme", list(facts))
    spans = []
    for fid, fact in facts.items():
        assert fact.kind is NodeKind.FACT
        sources = {n.node for n in fadj[fid] if n.kind is EdgeKind.DERIVED_FROM}
        assert sources and sources <= set(turn_of)
        assert set(fact.extra["sources"].split(",")) == sources
        spans.append({turn_of[s].turn_id.split(":")[0] for s in sources})
    # Session 2 repeats session 1's words: facts said in both are stored once, with both
    # sessions' episodes as sources (dedupe links new provenance instead of duplicating).
    assert any(span == {"D1", "D2"} for span in spans)
    assert len({ids.normalize_text(f.text) for f in facts.values()}) == len(facts)
    texts = " ".join(f.text for f in facts.values())
    assert "7 May 2023" in texts  # "yesterday" on 8 May 2023


async def test_llm_pipeline_survives_bad_answers_and_a_sigkill(settings, services, graph, tmp_path):
    with FakeOpenAIServer() as llm:
        env = {
            "GAAMA_LLM_BASE_URL": llm.base_url,
            "GAAMA_LLM_MODEL": "fake-model",
            "GAAMA_LLM_API_KEY": "sk-test",
            "GAAMA_LLM_TIMEOUT_S": "2",
            "GAAMA_LLM_MAX_RETRIES": "4",
        }
        # The first extraction call hangs: the worker is killed in the middle of the chunk.
        llm.script(slow(60))
        reflect = ServiceProcess("reflect", settings, tmp_path, **env).start()
        extract = ServiceProcess("extract", settings, tmp_path, **env).start()
        turns = session("acme", "conv-k", 8)
        await send(settings, turns)
        await wait_for(lambda: _async(len(llm.chat_requests()) >= 1), timeout=90)
        # the chunk is open and the extraction call is in flight: kill -9
        extract.kill(signal.SIGKILL)
        chunks = ChunkStore(graph.redis, graph.keys)
        assert len(await chunks.episodes("acme", "conv-k")) == len(turns)  # survived in Redis

        # After the restart the LLM misbehaves in every way before answering well.
        llm.reset()
        llm.script(malformed(), status(429, retry_after=0.1), status(500), truncated(), slow(5))
        extract = ServiceProcess("extract", settings, tmp_path, **env).start()
        try:

            async def complete():
                s = await graph_summary(graph, "acme", "conv-k")
                return s if s["extracted"] == len(turns) and s["reflections"] else None

            summary = await wait_for(complete, timeout=180)
            metrics = httpx.get(f"{extract.url}/metrics").text
        finally:
            extract.stop()
            reflect.stop()
    # The fake answers one fact per episode, citing it: exactly once in effect.
    assert len(summary["facts"]) == len(turns)
    facts = await graph.get_nodes("acme", list(summary["facts"]))
    assert len({f.text for f in facts.values()}) == len(turns)
    fadj = await graph.neighbours("acme", list(facts))
    for fid in facts:
        assert len([n for n in fadj[fid] if n.kind is EdgeKind.DERIVED_FROM]) == 1
    assert await ChunkStore(graph.redis, graph.keys).episodes("acme", "conv-k") == []
    assert 'gaama_extract_llm_failures_total{reason="malformed"}' in metrics
    assert 'gaama_extract_llm_tokens_total{direction="in"}' in metrics


async def _async(value):
    return value


async def test_a_silent_conversation_is_extracted_by_the_idle_close(
    settings, services, graph, tmp_path
):
    """No end of session: the running extract service closes the chunk once the conversation
    has been silent for chunk_idle_s while its consumer had caught up with the episodes topic
    (the idle clock does not run while the worker is joining its group or behind)."""
    extract = ServiceProcess("extract", settings, tmp_path).start()
    try:
        turns = [t.model_copy(update={"end_of_session": False}) for t in session("acme", "q", 8)]
        await send(settings, turns)

        async def extracted():
            return (await graph_summary(graph, "acme", "q"))["extracted"] == len(turns)

        await wait_for(extracted, timeout=90)
    finally:
        extract.stop()
