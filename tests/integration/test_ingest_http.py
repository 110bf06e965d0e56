"""Ingest's HTTP app in-process (ASGI transport) against the real Redis and a broker of its own
that the test starts, kills and restarts: a broker outage answers 503 with Retry-After within
GAAMA_PUBLISH_TIMEOUT_S (never a hang, never a 500), readiness follows the broker, the outage is
logged a few times not per request, and publishing recovers by itself. Also the request-body
limit and the per-tenant rate limit."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gaama import devstack
from gaama.config import ApiKey, Settings, hash_api_key
from gaama.devstack import processes
from gaama.embed import MiniLMEmbedder
from gaama.store.graph import GraphStore
from services.ingest.app import create_http_app
from services.ingest.handlers import IngestDeps
from services.runtime.producer import EventProducer
from tests.support.services import wait_for

pytestmark = pytest.mark.requires_stack

KEY = "ingest-key"
H = {"X-API-Key": KEY}
TURN = {
    "conversation": "web",
    "turn_id": "1",
    "speaker": "Ann",
    "text": "hello there",
    "timestamp": "2023-05-08T13:56:00Z",
}


class Broker:
    """A Tansu broker on a fixed port, started and killed at will."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = devstack.free_port()
        self.pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, settings: Settings) -> None:
        self.pid = processes.start_tansu(self.directory, self.port)
        processes.wait_tcp(self.port, self.pid, self.directory / "tansu.log", "tansu")
        await devstack.create_topics(self.bootstrap, 1, settings.topic_prefix)

    def kill(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.kill()


def _settings(settings: Settings, bootstrap: str, **update: object) -> Settings:
    keys = [ApiKey(key_sha256=hash_api_key(KEY), tenant="tenant-a")]
    return settings.model_copy(
        update={"kafka_bootstrap": bootstrap, "api_keys": keys, "publish_timeout_s": 1.5, **update}
    )


async def _ready() -> str | None:
    return None


def _client(s: Settings, graph: GraphStore, embedder: MiniLMEmbedder) -> httpx.AsyncClient:
    producer = EventProducer(s)
    deps = IngestDeps(settings=s, graph=graph, embedder=embedder)
    app = create_http_app(deps, CollectorRegistry(), _ready, producer)
    app.state.producer = producer
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ingest")


@pytest.fixture
async def api(
    settings: Settings, broker: Broker, graph: GraphStore, embedder: MiniLMEmbedder
) -> AsyncIterator[httpx.AsyncClient]:
    client = _client(_settings(settings, broker.bootstrap), graph, embedder)
    async with client:
        yield client
    await client._transport.app.state.producer.aclose()  # type: ignore[attr-defined]


async def _post_503_in_time(c: httpx.AsyncClient, bound_s: float) -> httpx.Response:
    t0 = time.monotonic()
    r = await c.post("/v1/turns", headers=H, json=TURN)
    elapsed = time.monotonic() - t0
    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"] == "5"
    assert "broker" in r.json()["error"]
    assert elapsed < bound_s, elapsed
    return r


async def _degraded_by_the_broker(api: httpx.AsyncClient) -> None:
    r = await api.get("/healthz")
    assert r.status_code == 200, r.text  # live: a restart would not bring the broker back
    body = r.json()
    assert body["status"] == "degraded" and body["dependencies"]["redis"] == "ok", body
    assert "broker" in body["dependencies"]["broker"], body


async def test_broker_outage_is_503_with_retry_after_and_recovers(
    api: httpx.AsyncClient, broker: Broker, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gaama.producer")
    bound = 1.5 + 1.5  # GAAMA_PUBLISH_TIMEOUT_S plus a generous margin
    # Never started: the broker is not there at all.
    for _ in range(5):
        await _post_503_in_time(api, bound)
    # The pod stays ready (its own 503 answers the requests); its health names the broker.
    assert (await api.get("/readyz")).status_code == 200
    await _degraded_by_the_broker(api)
    outage_lines = [r for r in caplog.records if r.name == "gaama.producer"]
    assert 1 <= len(outage_lines) <= 2, [r.getMessage() for r in outage_lines]

    # The broker comes up: the next request goes through, without a restart.
    await broker.start(settings)
    r = await api.post("/v1/turns", headers=H, json=TURN)
    assert r.status_code == 202 and r.json()["accepted"] == 1
    assert (await api.get("/readyz")).status_code == 200
    health = (await api.get("/healthz")).json()
    assert health == {"status": "ok", "dependencies": {"redis": "ok", "broker": "ok"}}

    # The broker dies under a started producer: 503 in time, still ready; back: recovers.
    broker.kill()
    for _ in range(3):
        await _post_503_in_time(api, bound)
    assert (await api.get("/readyz")).status_code == 200
    await _degraded_by_the_broker(api)
    await broker.start(settings)

    async def accepted() -> bool:
        r = await api.post("/v1/turns", headers=H, json=TURN)
        assert r.status_code in (202, 503), r.text  # never a 500
        return r.status_code == 202

    assert await wait_for(accepted, timeout=60, interval=0.5)
    assert (await api.get("/readyz")).status_code == 200
    assert (await api.get("/healthz")).json()["status"] == "ok"


async def test_body_limit_and_tenant_rate(
    settings: Settings, broker: Broker, graph: GraphStore, embedder: MiniLMEmbedder
) -> None:
    await broker.start(settings)
    s = _settings(
        settings,
        broker.bootstrap,
        http_max_body_bytes=64 * 1024,
        ingest_tenant_rate=1.0,
        ingest_tenant_burst=3,
    )
    async with _client(s, graph, embedder) as c:
        r = await c.post("/v1/turns", headers=H, json={**TURN, "text": "x" * 70_000})
        assert r.status_code == 413
        assert "65536 bytes (GAAMA_HTTP_MAX_BODY_BYTES)" in r.json()["error"]
        r = await c.post("/v1/turns", headers=H, content=b"{oops")
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
        turns = [{**TURN, "turn_id": str(i)} for i in range(3)]
        assert (await c.post("/v1/turns", headers=H, json={"turns": turns})).status_code == 202
        r = await c.post("/v1/turns", headers=H, json=TURN)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert "GAAMA_INGEST_TENANT_RATE" in r.json()["error"]
        metrics = (await c.get("/metrics")).text
        assert 'gaama_ingest_tenant_requests_total{bucket="' in metrics
        assert "tenant-a" not in metrics
        await c._transport.app.state.producer.aclose()  # type: ignore[attr-defined]
