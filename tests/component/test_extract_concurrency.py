"""The extract handler runs a batch's conversations side by side, so LLM calls overlap up to
GAAMA_LLM_CONCURRENCY (issue 19): real Redis, the real LLM client against the fake OpenAI
server answering after a fixed latency."""

from __future__ import annotations

import pytest

from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.llm.client import LLMClient
from gaama.llm.extractor import LLMExtractor
from gaama.store.chunks import ChunkStore
from services.extract import handlers as extract
from tests.component.test_forget_cascade import C1, as_records, turns
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.stream import Stream, _records

pytestmark = pytest.mark.requires_stack

CONVERSATIONS = 4


async def _closes(settings, graph, index, embedder, concurrency: int) -> tuple[int, int]:
    """Chunks closed by one extract batch of four conversations, and the most LLM calls the
    server saw at once."""
    with FakeOpenAIServer(latency_s=1.0) as server:
        s = settings.model_copy(
            update={
                "llm_base_url": server.base_url,
                "llm_model": "fake-model",
                "llm_concurrency": 4,
                "llm_timeout_s": 30.0,
            }
        )
        stream = Stream(s, graph, index, embedder)
        records = []
        for c in range(CONVERSATIONS):  # each conversation's last turn ends its session
            records += as_records(turns("acme", f"conv-{c}", C1))
        episodes = await stream.ingest(records)
        async with LLMClient(s) as client:
            pipeline = ExtractionPipeline(
                ExtractDeps(
                    s,
                    graph,
                    index,
                    ChunkStore(graph.redis, graph.keys),
                    embedder,
                    LLMExtractor(client),
                )
            )
            result = await extract.handle(
                _records(episodes.out), pipeline, stream.forgetting, concurrency=concurrency
            )
        assert result.failed == []
        return len(result.out), server.max_in_flight


async def test_conversations_of_a_batch_call_the_llm_concurrently(settings, graph, index, embedder):
    closed, at_once = await _closes(settings, graph, index, embedder, concurrency=4)
    assert closed == CONVERSATIONS
    assert at_once > 1


async def test_concurrency_one_keeps_the_calls_in_sequence(settings, graph, index, embedder):
    closed, at_once = await _closes(settings, graph, index, embedder, concurrency=1)
    assert closed == CONVERSATIONS
    assert at_once == 1
