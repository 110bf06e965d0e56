"""One turn's trace across the four real services, and their JSON log lines.

The services run as processes, each writing its spans as JSON lines to a file of its own
(``GAAMA_OTEL_EXPORTER=file``): the test reads the four files and follows the POST's trace id
through the produce, consume, episode write, chunk close, LLM call, fact write and reflect spans.
Only the LLM is faked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gaama.config import ApiKey, Settings
from gaama.tracing import tenant_digest
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.services import ServiceProcess, api_keys, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

KEY = "key-tracing"
TENANT = "tenant-tracing-acme"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"

TURNS = [
    ("Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "That's great! I painted a lake sunrise last year, painting relaxes me."),
    ("Caroline", "I'm thinking about adopting a child; the agency interviews are next month."),
]


@pytest.fixture
def keyed(settings: Settings) -> Settings:
    return settings.model_copy(update={"api_keys": [ApiKey(**k) for k in api_keys((KEY, TENANT))]})


def spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trace_of(span: dict[str, Any]) -> str:
    return str(span["context"]["trace_id"]).removeprefix("0x")


@pytest.fixture
def llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


async def test_one_turn_is_followed_across_the_four_services(
    keyed: Settings, topics, index, tmp_path: Path, llm: FakeOpenAIServer
):
    files = {name: tmp_path / f"spans-{name}.jsonl" for name in ("ingest", "extract", "reflect")}
    files["query"] = tmp_path / "spans-query.jsonl"
    llm_env = {
        "GAAMA_LLM_BASE_URL": llm.base_url,
        "GAAMA_LLM_MODEL": "fake-model",
        "GAAMA_LLM_API_KEY": "sk-test",
    }

    def env(name: str) -> dict[str, str]:
        out = {
            "GAAMA_OTEL_EXPORTER": "file",
            "GAAMA_OTEL_FILE": str(files[name]),
            "GAAMA_LOG_FORMAT": "json",
        }
        return {**out, **llm_env} if name in ("extract", "reflect") else out

    procs = [ServiceProcess(n, keyed, tmp_path, **env(n)).start() for n in files]
    ingest, extract, _reflect, query = procs
    try:
        body = {
            "turns": [
                {
                    "conversation": "conv-t",
                    "turn_id": f"D1:{i + 1}",
                    "speaker": speaker,
                    "text": text,
                    "timestamp": f"2023-05-08T13:0{i}:00Z",
                    "end_of_session": i == len(TURNS) - 1,
                }
                for i, (speaker, text) in enumerate(TURNS)
            ]
        }
        r = httpx.post(
            f"{ingest.url}/v1/turns",
            json=body,
            headers={"X-API-Key": KEY, "traceparent": TRACEPARENT},
            timeout=30,
        )
        assert r.status_code == 202, r.text

        def names(service: str) -> set[str]:
            return {s["name"] for s in spans(files[service]) if trace_of(s) == TRACE_ID}

        async def reflected() -> bool:
            return "reflections.write" in names("reflect") or "reflect" in names("reflect")

        await wait_for(reflected, timeout=120)
        r = httpx.post(
            f"{query.url}/v1/search",
            json={"query": "what did Caroline go to?"},
            headers={"X-API-Key": KEY},
            timeout=30,
        )
        assert r.status_code == 200, r.text

        async def searched() -> bool:
            return any(s["name"] == "search.knn" for s in spans(files["query"]))

        await wait_for(searched, timeout=30)
    finally:
        for p in procs:
            p.stop()

    ingest_names = names("ingest")
    assert {"POST /v1/turns", "send " + keyed.topic_prefix + "gaama.turns.v1"} <= ingest_names
    assert {"episode.embed", "episode.write"} <= ingest_names
    assert any(n.startswith("process ") for n in ingest_names)
    extract_names = names("extract")
    assert {"chunk.close", "chunk.extract", "chat fake-model", "facts.write"} <= extract_names
    assert any(n.startswith("process ") and "episodes" in n for n in extract_names)
    assert any(n.startswith("send ") and "facts" in n for n in extract_names)
    assert {"reflect"} <= names("reflect")
    assert any(n.startswith("process ") and "facts" in n for n in names("reflect"))

    # The LLM call is described by the gen_ai conventions, token counts included.
    chat = next(
        s
        for s in spans(files["extract"])
        if s["name"] == "chat fake-model" and trace_of(s) == TRACE_ID
    )
    attrs = chat["attributes"]
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "fake-model"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.usage.input_tokens"] > 0
    assert "gen_ai.usage.output_tokens" in attrs
    assert chat["kind"] == "SpanKind.CLIENT"

    # Consume spans are the children of the previous stage's publish spans.
    by_id = {
        s["context"]["span_id"]: s
        for f in files.values()
        for s in spans(f)
        if trace_of(s) == TRACE_ID
    }
    for s in by_id.values():
        if s["name"].startswith("process ") and s["parent_id"] is not None:
            parent = by_id.get(s["parent_id"])
            assert parent is not None and parent["name"].startswith("send "), s["name"]

    # The search stages are spans of the query request.
    q = spans(files["query"])
    stage_names = {s["name"] for s in q}
    assert {"POST /v1/search", "search", "search.embed", "search.knn", "search.pack"} <= stage_names
    search = next(s for s in q if s["name"] == "search")
    assert search["attributes"]["gaama.tenant.digest"] == tenant_digest(TENANT)

    # No span carries the tenant's name, anywhere.
    for f in files.values():
        assert TENANT not in f.read_text(), f

    # JSON log lines: every line each service wrote is one object (faust's, uvicorn's and the
    # Kafka client's too); the record being handled and the trace are named on the chunk's line.
    for proc in procs:
        lines = [ln for ln in proc.log_path.read_text().splitlines() if ln.strip()]
        assert lines, proc.name
        for line in lines:
            entry = json.loads(line)
            assert {"time", "level", "logger", "message", "service"} <= set(entry), line
            assert entry["service"] == proc.name
        assert TENANT not in proc.log_path.read_text()
    logs = [json.loads(ln) for ln in extract.log_path.read_text().splitlines() if ln.strip()]
    chunk_line = next(e for e in logs if e["logger"] == "gaama.extract" and "facts" in e["message"])
    assert chunk_line["trace_id"] == TRACE_ID
    assert chunk_line["topic"].endswith("gaama.episodes.v1")
    assert isinstance(chunk_line["partition"], int)
    assert isinstance(chunk_line["offset"], int)
    assert chunk_line["tenant"] == tenant_digest(TENANT)
