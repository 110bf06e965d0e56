"""A consumer that has input and commits none of it, with no outage to explain it, reports not
live: ``/healthz`` and ``/readyz`` answer 503 (``no_progress``) and
``gaama_<service>_no_progress_seconds`` counts, so Kubernetes restarts it; the restarted process
resumes from the committed offsets. The wedge here is real: the extract service (a process, on
the real broker and Redis) waits on an LLM call that does not return within the time a batch
may take, with no error to retry — the shape of the chaos runs' silent stop."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.fakes.openai_server import FakeOpenAIServer, slow
from tests.integration.test_pipeline_e2e import graph_summary, send, session
from tests.support.services import ServiceProcess, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

METRIC = "gaama_extract_no_progress_seconds"


def _gauge(text: str) -> float:
    for line in text.splitlines():
        if line.startswith(METRIC + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{METRIC} not exported")


async def test_a_wedged_consumer_reports_not_live_and_a_restart_resumes_it(
    settings, topics, index, graph, tmp_path
):
    ingest = ServiceProcess("ingest", settings, tmp_path).start()
    try:
        with FakeOpenAIServer() as llm:
            env = {
                "GAAMA_LLM_BASE_URL": llm.base_url,
                "GAAMA_LLM_MODEL": "fake-model",
                "GAAMA_LLM_API_KEY": "sk-test",
                "GAAMA_LLM_TIMEOUT_S": "600",  # the call neither answers nor fails
                "GAAMA_PROGRESS_TIMEOUT_S": "4",
                "GAAMA_LAG_INTERVAL_S": "0.5",
            }
            llm.script(slow(600))
            extract = ServiceProcess("extract", settings, tmp_path, **env).start()
            try:
                async with httpx.AsyncClient(base_url=extract.url, timeout=5) as http:
                    assert (await http.get("/healthz")).status_code == 200
                    assert _gauge((await http.get("/metrics")).text) == 0
                    turns = session("acme", "conv-w", 8)
                    await send(settings, turns)

                    async def not_live() -> httpx.Response | None:
                        r = await http.get("/healthz")
                        return r if r.status_code == 503 else None

                    health = await wait_for(not_live, timeout=90, interval=0.5)
                    ready = await http.get("/readyz")
                    waited = _gauge((await http.get("/metrics")).text)
                assert (
                    len(llm.chat_requests()) == 1
                )  # one call, still in flight: no retry, no error
                body = health.json()
                assert body["status"] == "no_progress"
                assert "GAAMA_PROGRESS_TIMEOUT_S=4" in body["reason"]
                assert ready.status_code == 503 and ready.json()["status"] == "no_progress"
                assert waited >= 4
            finally:
                extract.kill(signal.SIGKILL)  # what the failed liveness probe leads to
            llm.reset()  # the endpoint answers again
            extract = ServiceProcess("extract", settings, tmp_path, **env).start()
            try:

                async def extracted() -> bool:
                    return (await graph_summary(graph, "acme", "conv-w"))["extracted"] == len(turns)

                await wait_for(extracted, timeout=120)
                async with httpx.AsyncClient(base_url=extract.url, timeout=5) as http:

                    async def caught_up() -> bool:  # once the last batch's offsets are committed
                        return _gauge((await http.get("/metrics")).text) == 0

                    await wait_for(caught_up, timeout=30)
                    assert (await http.get("/healthz")).json()["status"] == "ok"
            finally:
                extract.stop()
    finally:
        ingest.stop()
