"""A stage retrying a Redis outage says so: ``/healthz`` is ``degraded`` with the stall's reason
and since when while ``/readyz`` stays 200 (the pod itself is fine),
``gaama_<service>_stalled_since_timestamp_seconds`` is set, and all of it clears by itself once
Redis answers again (the ingest service as a process, Redis paused)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import pytest

from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, encode
from tests.integration.test_store_outage import redis_paused
from tests.support.services import ServiceProcess, produce, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

METRIC = 'gaama_ingest_stalled_since_timestamp_seconds{reason="store_unavailable"}'


def _gauge(text: str) -> float:
    for line in text.splitlines():
        if line.startswith(METRIC):
            return float(line.split()[-1])
    raise AssertionError(f"{METRIC} not exported")


async def test_a_paused_redis_shows_as_stalled_and_clears_by_itself(
    settings, topics, index, graph, tmp_path
):
    ingest = ServiceProcess("ingest", settings, tmp_path).start()
    turn = TurnReceived(
        tenant="acme",
        conversation="c1",
        turn_id="T1",
        speaker="Ann",
        text="The offsite moved to Lisbon.",
        timestamp=datetime(2024, 3, 1, tzinfo=UTC),
    )
    try:
        async with httpx.AsyncClient(base_url=ingest.url, timeout=5) as http:
            assert (await http.get("/healthz")).json()["status"] == "ok"
            assert _gauge((await http.get("/metrics")).text) == 0
            before = time.time()
            async with redis_paused(settings.redis_url, 25_000):
                await produce(
                    settings.kafka_bootstrap,
                    settings.topic_prefix + TOPIC_TURNS,
                    [(conversation_key("acme", "c1"), encode(turn))],
                )

                async def stalled() -> dict | None:
                    body = (await http.get("/healthz")).json()
                    return body if "stalled" in body else None

                health = await wait_for(stalled, timeout=24, interval=0.5)
                ready = await http.get("/readyz")
                gauge = _gauge((await http.get("/metrics")).text)
            assert health["status"] == "degraded"
            assert health["stalled"]["reason"].startswith("store_unavailable: ")
            since = datetime.fromisoformat(health["stalled"]["since"]).timestamp()
            assert before - 1 <= since <= time.time()
            assert ready.status_code == 200 and ready.json() == {"status": "ready"}
            assert abs(gauge - since) < 1.5

            async def recovered() -> bool:
                body = (await http.get("/healthz")).json()
                return body["status"] == "ok" and (await http.get("/readyz")).status_code == 200

            await wait_for(recovered, timeout=60, interval=0.5)
            assert _gauge((await http.get("/metrics")).text) == 0
        assert await graph.chain("acme", "c1") != []  # the turn got through
    finally:
        ingest.stop()
