"""LLMClient and LLMExtractor through the real ``openai`` SDK against a local fake server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gaama.config import Settings
from gaama.errors import CassetteMiss, ConfigError, LLMOutputError, LLMTransientError
from gaama.extract.types import (
    ContextFact,
    EpisodeView,
    ExtractionContext,
    ReflectionInput,
)
from gaama.llm import prompts
from gaama.llm.cassette import Cassette
from gaama.llm.client import LLMClient, parse_json_object
from gaama.llm.extractor import (
    LLMExtractor,
    normalize_label,
    validate_extraction,
    validate_reflections,
)
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

MODEL = "fake-model"
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


def episodes(n: int = 3) -> list[EpisodeView]:
    ts = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    said = [
        "I went to a pottery workshop yesterday!",
        "That sounds lovely, what did you make?",
        "A small bowl for my kids.",
        "We are going camping next month.",
    ]
    speakers = ["Caroline", "Melanie"]
    out = []
    for i in range(n):
        sp = speakers[i % 2]
        text = said[i % len(said)]
        out.append(
            EpisodeView(
                id=f"ep_{i:024x}",
                speaker=sp,
                raw_text=text,
                text=f"[1:56 pm on 8 May, 2023] {sp}: {text}",
                timestamp=ts,
                turn_id=str(i),
            )
        )
    return out


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
    with pytest.raises(LLMOutputError, match="malformed after 3 attempts"):
        await ask(client)
    assert server.pending() == 1  # output_retries=2: three attempts, no more
    assert sample(registry, "calls_total", extractor=MODEL, outcome="error") == 1


async def test_slow_beyond_timeout_is_retried(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(slow(1.5, then=good({"answer": "stale"})), good({"answer": "fresh"}))
    started = time.monotonic()
    assert await ask(client) == {"answer": "fresh"}
    assert time.monotonic() - started < 1.4  # gave up on the slow one at the 0.5 s timeout
    assert sample(registry, "failures_total", reason="timeout") == 1


async def test_429_honours_retry_after(
    client: LLMClient, server: FakeOpenAIServer, registry: CollectorRegistry
) -> None:
    server.script(status(429, retry_after=0.3), good({"answer": "ok"}))
    started = time.monotonic()
    assert await ask(client) == {"answer": "ok"}
    # Our own backoff would be ~0.01 s; the wait proves Retry-After was honoured.
    assert time.monotonic() - started >= 0.3
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


def test_parse_json_object_variants() -> None:
    assert parse_json_object('{"a": 1}') == {"a": 1}
    assert parse_json_object('```json\n{"a": 2}\n```') == {"a": 2}
    assert parse_json_object('Here you go: {"a": 3} hope it helps') == {"a": 3}
    with pytest.raises(ValueError):
        parse_json_object('{"a": ')
    with pytest.raises(ValueError):
        parse_json_object("[1, 2]")


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


def test_extraction_validation_repairs_and_drops() -> None:
    chunk = episodes(3)
    e0, e1, e2 = (ep.id for ep in chunk)
    answer = {
        "facts": [
            {  # kept; the foreign id is removed, belief clamped, labels normalised
                "text": "  Caroline attended a pottery workshop on 7 May 2023. ",
                "belief": 7,
                "source_episode_ids": [e0, "ep_not_in_chunk"],
                "subject": "Caroline",
                "concepts": ["Pottery Hobby", "caroline", "general", "potteryHobby", "a-b-c-d-e"],
            },
            {"text": "Only foreign ids.", "belief": 1, "source_episode_ids": ["ep_x"]},
            {"text": "   ", "belief": 1, "source_episode_ids": [e1]},
            {"text": 42, "belief": 1, "source_episode_ids": [e1]},
            {"text": "Belief is a word.", "belief": "high", "source_episode_ids": [e1]},
            {"text": "Negative belief.", "belief": -3, "source_episode_ids": e1},  # str id
            {"text": "String belief.", "belief": "0.4", "source_episode_ids": [e2], "subject": 5},
            "not an object",
        ],
        "episodes": [
            {"episode_id": e0, "concepts": ["pottery_hobby", "art", "kids", "family"]},
            {"episode_id": "ep_unknown", "concepts": ["x_topic"]},
            {"episode_id": e1, "concepts": ["Melanie", "chat"]},  # nothing usable left
        ],
    }
    result = validate_extraction(answer, chunk, MODEL)
    by_text = {f.text: f for f in result.facts}
    assert set(by_text) == {
        "Caroline attended a pottery workshop on 7 May 2023.",
        "Negative belief.",
        "String belief.",
    }
    first = by_text["Caroline attended a pottery workshop on 7 May 2023."]
    assert first.source_episode_ids == (e0,)
    assert first.belief == 1.0
    assert first.concepts == ("pottery_hobby", "a_b_c_d")
    assert by_text["Negative belief."].belief == 0.0
    assert by_text["Negative belief."].source_episode_ids == (e1,)
    assert by_text["String belief."].belief == pytest.approx(0.4)
    assert by_text["String belief."].subject == ""
    assert result.episode_concepts == {e0: ("pottery_hobby", "art", "kids")}
    assert result.extractor == MODEL


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


def test_empty_extraction_is_valid() -> None:
    result = validate_extraction({"facts": [], "episodes": []}, episodes(2), MODEL)
    assert result.facts == [] and result.episode_concepts == {}


def test_normalize_label() -> None:
    assert normalize_label("Camping Trip") == "camping_trip"
    assert normalize_label("job-interview!") == "job_interview"
    assert normalize_label("LGBTQ support group meetings weekly") == "lgbtq_support_group_meetings"
    assert normalize_label("misc") is None
    assert normalize_label("2023") is None
    assert normalize_label(["x"]) is None
    assert normalize_label("Caroline", forbidden=frozenset({"caroline"})) is None


def test_reflection_validation() -> None:
    facts = [ReflectionInput(id=f"fa_{i}", text=f"fact {i}") for i in range(3)]
    answer = {
        "reflections": [
            {"text": "Combines two.", "fact_ids": ["fa_0", "fa_1", "fa_9"], "subject": "C"},
            {"text": "Only one known id.", "fact_ids": ["fa_0", "fa_9"], "subject": ""},
            {"text": "Already known.", "fact_ids": ["fa_1", "fa_2"], "subject": ""},
            {"text": "", "fact_ids": ["fa_1", "fa_2"], "subject": ""},
        ]
    }
    out = validate_reflections(answer, facts, existing=["already known."])
    assert [(r.text, r.fact_ids) for r in out] == [("Combines two.", ("fa_0", "fa_1"))]
    with pytest.raises(LLMOutputError):
        validate_reflections({"reflections": [answer["reflections"][1]]}, facts, [])
    with pytest.raises(LLMOutputError):
        validate_reflections({"nope": []}, facts, [])
    assert validate_reflections({"reflections": []}, facts, []) == []


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


def test_prompts_render_and_check_placeholders() -> None:
    for name in prompts.PROMPT_NAMES:
        system, user = prompts.load_template(name)
        assert system and user
    p = prompts.render("answer", question="Where {braces}?", memory="{not a placeholder}")
    assert "Where {braces}?" in p.user and "{not a placeholder}" in p.user
    with pytest.raises(ConfigError, match="missing"):
        prompts.render("answer", question="q")
    with pytest.raises(ConfigError, match="unknown prompt"):
        prompts.render("nope")
