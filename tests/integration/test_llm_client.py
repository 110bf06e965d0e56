"""LLMClient and LLMExtractor through the real ``openai`` SDK against a local fake server."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gaama.config import Settings
from gaama.errors import (
    CassetteMiss,
    ConfigError,
    LLMMalformedOutput,
    LLMOutputError,
    LLMTransientError,
)
from gaama.extract.types import (
    ContextFact,
    ExtractionContext,
    ReflectionInput,
)
from gaama.llm.cassette import Cassette
from gaama.llm.client import LLMClient
from gaama.llm.extractor import LLMExtractor
from gaama.llm.validation import validate_extraction
from gaama.metrics import LLMMetrics, llm_metrics
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    good,
    good_text,
    malformed,
    refusal,
    reject_json_schema,
    slow,
    status,
    truncated,
)
from tests.support.llm import MODEL, episodes

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["answer"],
    "properties": {"answer": {"type": "string"}},
}


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def server(_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    _server.reset()
    yield _server
    _server.reset()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> LLMMetrics:
    return llm_metrics("test", registry)


def make_settings(base_url: str | None, **over: Any) -> Settings:
    values: dict[str, Any] = {
        "llm_base_url": base_url,
        "llm_model": MODEL if base_url else None,
        "llm_timeout_s": 0.5,
        "llm_max_retries": 2,
        "retry_backoff_s": 0.01,
    }
    values.update(over)
    return Settings(**values)


@pytest.fixture
async def client(server: FakeOpenAIServer, metrics: LLMMetrics) -> AsyncIterator[LLMClient]:
    c = LLMClient(make_settings(server.base_url), metrics=metrics)
    yield c
    await c.aclose()


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(f"gaama_test_llm_{name}", labels)
    return 0.0 if value is None else value


async def ask(client: LLMClient, user: str = "question?") -> dict[str, Any]:
    return await client.complete_json(
        stage="test", system="Answer in JSON.", user=user, schema=SCHEMA, schema_name="t_answer"
    )


# --- the client ------------------------------------------------------------------------------


async def test_good_answer_parsed(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(good({"answer": "yes"}))
    assert await ask(client) == {"answer": "yes"}
    (req,) = server.chat_requests()
    assert req["model"] == MODEL
    assert req["response_format"]["type"] == "json_schema"
    assert req["response_format"]["json_schema"]["strict"] is True
    assert req["response_format"]["json_schema"]["schema"] == SCHEMA
    assert sample(registry, "calls_total", extractor=MODEL, outcome="ok") == 1
    assert sample(registry, "tokens_total", direction="in") > 0
    assert sample(registry, "tokens_total", direction="out") > 0
    assert sample(registry, "seconds_count") == 1


async def test_malformed_then_good_is_retried(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(malformed(), good({"answer": "ok"}))
    assert await ask(client) == {"answer": "ok"}
    assert len(server.chat_requests()) == 2
    assert sample(registry, "failures_total", reason="malformed") == 1
    assert sample(registry, "calls_total", extractor=MODEL, outcome="ok") == 1


async def test_truncated_then_good_is_retried(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(truncated(), good({"answer": "ok"}))
    assert await ask(client) == {"answer": "ok"}
    assert sample(registry, "failures_total", reason="malformed") == 1


async def test_malformed_forever_raises_output_error(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(malformed(), truncated(), malformed(), good({"answer": "too late"}))
    with pytest.raises(LLMMalformedOutput, match="malformed after 3 attempts"):
        await ask(client)
    assert server.pending() == 1  # output_retries=2: three attempts, no more
    assert sample(registry, "calls_total", extractor=MODEL, outcome="error") == 1


async def test_slow_beyond_timeout_is_retried(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(slow(1.5, then=good({"answer": "stale"})), good({"answer": "fresh"}))
    # the slow answer never arrived: the client gave up on it at its timeout and asked again
    assert await ask(client) == {"answer": "fresh"}
    assert len(server.chat_requests()) == 2 and server.pending() == 0
    assert sample(registry, "failures_total", reason="timeout") == 1


async def test_429_honours_retry_after(
    client: LLMClient,
    server: FakeOpenAIServer,
    registry: CollectorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.script(status(429, retry_after=0.3), good({"answer": "ok"}))
    with caplog.at_level(logging.WARNING, "gaama.llm.client"):
        assert await ask(client) == {"answer": "ok"}
    # Our own backoff would be ~0.01 s: the wait chosen is Retry-After's.
    [retry] = [r for r in caplog.records if "retry" in r.getMessage()]
    assert retry.args is not None and retry.args[-1] >= 0.3  # type: ignore[index,operator]
    assert sample(registry, "failures_total", reason="rate_limited") == 1


async def test_5xx_beyond_max_retries_raises_transient(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(status(500), status(502), status(503), good({"answer": "never"}))
    with pytest.raises(LLMTransientError, match="server_error after 3 attempts") as info:
        await ask(client)
    assert info.value.retryable
    assert len(server.chat_requests()) == 3  # 1 + llm_max_retries, SDK retries disabled
    assert sample(registry, "failures_total", reason="server_error") == 3
    assert sample(registry, "calls_total", extractor=MODEL, outcome="error") == 1


async def test_connection_error_is_transient(
    metrics: LLMMetrics, registry: CollectorRegistry
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    c = LLMClient(make_settings(f"http://127.0.0.1:{port}/v1", llm_max_retries=1), metrics=metrics)
    try:
        with pytest.raises(LLMTransientError, match="connection"):
            await ask(c)
    finally:
        await c.aclose()
    assert sample(registry, "failures_total", reason="connection") == 2


async def test_refusal_raises_output_error_without_retry(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(refusal(), good({"answer": "never"}))
    with pytest.raises(LLMOutputError, match="refused") as info:
        await ask(client)
    assert info.value.reason == "refusal"
    assert len(server.chat_requests()) == 1
    assert sample(registry, "failures_total", reason="refusal") == 1


async def test_json_schema_rejected_falls_back_and_remembers(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(reject_json_schema(), good({"answer": "one"}), good({"answer": "two"}))
    assert await ask(client, "first") == {"answer": "one"}
    assert await ask(client, "second") == {"answer": "two"}
    formats = [r["response_format"]["type"] for r in server.chat_requests()]
    assert formats == ["json_schema", "json_object", "json_object"]  # remembered
    assert client.format_mode == "json_object"
    # The schema moved into the prompt, which also names JSON as JSON mode requires.
    system = server.chat_requests()[-1]["messages"][0]["content"]
    assert "t_answer" in system and '"answer"' in system and "JSON" in system
    assert sample(registry, "failures_total", reason="other") == 0


async def test_json_object_rejected_falls_back_to_text(
    client: LLMClient, server: FakeOpenAIServer
) -> None:
    server.reject_formats.update({"json_schema", "json_object"})
    server.script(good_text('Sure! Here it is:\n```json\n{"answer": "fenced"}\n```'))
    assert await ask(client) == {"answer": "fenced"}
    reqs = server.chat_requests()
    assert [r.get("response_format", {}).get("type") for r in reqs] == [
        "json_schema",
        "json_object",
        None,
    ]
    assert client.format_mode == "text"


async def test_other_400_is_permanent(client: LLMClient, server: FakeOpenAIServer) -> None:
    server.script(status(400, message="context length exceeded"))
    with pytest.raises(LLMOutputError, match="rejected the request"):
        await ask(client)
    assert client.format_mode == "json_schema"


async def test_concurrency_is_bounded(server: FakeOpenAIServer, metrics: LLMMetrics) -> None:
    server.script(*[slow(0.1, then=good({"answer": str(i)})) for i in range(6)])
    async with LLMClient(make_settings(server.base_url, llm_concurrency=2), metrics=metrics) as c:
        answers = await asyncio.gather(*(ask(c, str(i)) for i in range(6)))
    assert len(answers) == 6
    assert server.max_in_flight == 2


def test_replay_mode_needs_no_endpoint_but_needs_a_cassette(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        LLMClient(
            make_settings(
                None, llm_cassette=str(tmp_path / "none.jsonl"), llm_cassette_mode="replay"
            )
        )


# --- record / replay -------------------------------------------------------------------------


async def test_record_then_replay_with_server_stopped(tmp_path: Path) -> None:
    cassette = tmp_path / "llm.jsonl"
    chunk = episodes(4)
    context = ExtractionContext(
        episodes=[], facts=[ContextFact(id="fa_old", text="Caroline paints.")], concepts=["art"]
    )
    with FakeOpenAIServer() as srv:
        settings = make_settings(
            srv.base_url, llm_cassette=str(cassette), llm_cassette_mode="record"
        )
        async with LLMClient(settings) as c:
            ex = LLMExtractor(c)
            recorded = await ex.extract(chunk, context)
            facts = [
                ReflectionInput(id=f"fa_{i}", text=f.text) for i, f in enumerate(recorded.facts)
            ]
            recorded_refl = await ex.reflect(facts, existing=[])
    lines = cassette.read_text().splitlines()
    assert len(lines) == 2
    assert {json.loads(line)["stage"] for line in lines} == {"extract", "reflect"}

    # Server gone, no base URL, no model: everything comes from the cassette.
    settings = make_settings(None, llm_cassette=str(cassette), llm_cassette_mode="replay")
    registry = CollectorRegistry()
    async with LLMClient(settings, metrics=llm_metrics("test", registry)) as c:
        assert c.model == MODEL
        ex = LLMExtractor(c)
        assert await ex.extract(chunk, context) == recorded
        assert await ex.reflect(facts, existing=[]) == recorded_refl
        assert sample(registry, "calls_total", extractor=MODEL, outcome="ok") == 2

        changed = ExtractionContext(concepts=["art", "music"])
        with pytest.raises(CassetteMiss, match=r"stage 'extract'.*key [0-9a-f]{64}"):
            await ex.extract(chunk, changed)
        assert sample(registry, "failures_total", reason="cassette_miss") == 1
        assert sample(registry, "calls_total", extractor=MODEL, outcome="error") == 1


async def test_record_keys_ignore_format_fallback(tmp_path: Path) -> None:
    cassette = tmp_path / "llm.jsonl"
    with FakeOpenAIServer() as srv:
        srv.reject_formats.add("json_schema")
        srv.script(good({"answer": "via json mode"}))
        settings = make_settings(
            srv.base_url, llm_cassette=str(cassette), llm_cassette_mode="record"
        )
        async with LLMClient(settings) as c:
            await ask(c)
    replay = make_settings(None, llm_cassette=str(cassette), llm_cassette_mode="replay")
    async with LLMClient(replay) as c:
        assert await ask(c) == {"answer": "via json mode"}


def test_cassette_appends_are_safe_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    code = (
        "import sys\n"
        "from gaama.llm.cassette import Cassette\n"
        "c = Cassette(sys.argv[1])\n"
        "for i in range(50):\n"
        "    c.record(f'{sys.argv[2]}-{i}', stage='s', model='m', request={'i': i},\n"
        "             response={'pad': 'x' * 3000, 'i': i})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"p{n}"]) for n in range(4)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    lines = path.read_text().splitlines()
    assert len(lines) == 200
    assert len({json.loads(line)["key"] for line in lines}) == 200
    assert len(Cassette(path).entries()) == 200


# --- the extractor ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ([1, 2], "not an object"),
        ({"facts": "none", "episodes": 3}, "not a list"),
        ({}, "missing 'facts'"),
        ({"facts": [{"text": "x", "belief": 1, "source_episode_ids": ["ep_zz"]}]}, "every item"),
    ],
)
def test_unusable_extraction_raises(answer: object, why: str) -> None:
    with pytest.raises(LLMOutputError, match=why):
        validate_extraction(answer, episodes(2), MODEL)


async def test_extractor_end_to_end_with_default_responder(
    client: LLMClient, server: FakeOpenAIServer
) -> None:
    ex = LLMExtractor(client)
    assert ex.name == MODEL
    chunk = episodes(4)
    older = episodes(1)
    context = ExtractionContext(episodes=older, facts=[], concepts=["pottery_hobby"])
    result = await ex.extract(chunk, context)
    assert len(result.facts) == 4
    assert set(result.episode_concepts) == {ep.id for ep in chunk}
    assert all(1 <= len(c) <= 3 for c in result.episode_concepts.values())
    user = server.chat_requests()[0]["messages"][1]["content"]
    assert "1:56 pm on 8 May, 2023" in user and "pottery_hobby" in user

    facts = [ReflectionInput(id=f"fa_{i}", text=f.text) for i, f in enumerate(result.facts)]
    reflections = await ex.reflect(facts, existing=[])
    assert len(reflections) == 1 and reflections[0].fact_ids == ("fa_0", "fa_1")
    assert await ex.reflect(facts[:1], existing=[]) == []  # nothing to combine: no call

    assert await ex.answer("What did Caroline make?", "A small bowl.\nOther notes.") == (
        "A small bowl."
    )
    assert await ex.judge("q?", "a bowl", "She made a bowl.") == (1.0, True)
    assert await ex.judge("q?", "a bowl", "A vase.") == (0.0, False)


async def test_judge_partial_credit(client: LLMClient, server: FakeOpenAIServer) -> None:
    reward = {
        "key_facts": [
            {"fact": "7 May 2023", "present": True},
            {"fact": "pottery", "present": True},
            {"fact": "with kids", "present": False},
        ],
        "score": 0.9,  # ignored: the listed key facts decide
    }
    binary = {"reasoning": "close enough", "label": "CORRECT"}

    def responder(request: dict[str, Any]) -> dict[str, Any]:
        name = request["response_format"]["json_schema"]["name"]
        return reward if name == "gaama_judge_reward" else binary

    server.responder = responder
    score, correct = await LLMExtractor(client).judge("q", "ref", "cand")
    assert score == pytest.approx(2 / 3) and correct is True
