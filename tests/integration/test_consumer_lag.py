"""Consumer lag is real: a backlog on the real broker shows in /metrics, and drains to 0.

The ingest service runs as a real process; Redis holds its writes (``CLIENT PAUSE WRITE``) so
the turns produced meanwhile pile up. The same test shows the stage riding out the outage:
retried, nothing dead-lettered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gaama.config import Settings
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, encode
from gaama.store import connect
from gaama.store.graph import GraphStore
from tests.deploy.test_manifests import alert_rules, metric_names
from tests.support.redis_state import on_every_primary
from tests.support.services import ServiceProcess, produce, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

TURNS = 200
CONVERSATIONS = 8


@pytest.fixture
def ingest(
    settings: Settings, topics: list[str], index, tmp_path: Path
) -> Iterator[ServiceProcess]:
    svc = ServiceProcess("ingest", settings, tmp_path, GAAMA_LAG_INTERVAL_S="0.5").start()
    yield svc
    svc.stop()


@pytest.fixture
async def writes_paused(settings: Settings) -> AsyncIterator[list[bool]]:
    """Pause Redis writes until the test flips the flag (or ends)."""
    admin = connect(settings.redis_url, cluster=settings.redis_cluster)
    state = [False]
    yield state
    if state[0]:
        await on_every_primary(admin, "CLIENT", "UNPAUSE")
    await admin.aclose()


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def lag_alert_value(series: dict[str, list[tuple[dict[str, str], float]]], topic: str) -> float:
    """``sum(max by (topic, partition) (gaama_ingest_consumer_lag))``, the alert's expression,
    evaluated on one scrape of one replica."""
    by_partition: dict[tuple[str, str], float] = {}
    for labels, value in series.get("gaama_ingest_consumer_lag", []):
        assert labels["topic"] == topic
        key = (labels["topic"], labels["partition"])
        by_partition[key] = max(by_partition.get(key, 0.0), value)
    return sum(by_partition.values())


def turn(conv: int, i: int) -> TurnReceived:
    return TurnReceived(
        tenant="lag",
        conversation=f"c{conv}",
        turn_id=f"D1:{i}",
        speaker="Ann",
        text=f"turn {i} of conversation {conv}",
        timestamp=f"2023-05-08T13:{i % 60:02d}:00Z",
    )


async def test_backlog_shows_as_lag_and_drains_to_zero(
    ingest: ServiceProcess, settings: Settings, graph: GraphStore, writes_paused: list[bool]
):
    topic = settings.topic_prefix + TOPIC_TURNS
    lag_rules = [r for r in alert_rules() if r["alert"] == "GaamaConsumerLagHigh"]
    ingest_rule = next(r for r in lag_rules if r["labels"]["stage"] == "ingest")
    wanted = metric_names(ingest_rule["expr"])
    assert wanted == {"gaama_ingest_consumer_lag"}

    # Label values exist before any traffic: every partition of the topic, at 0.
    series = scrape(ingest.url)
    parts = {lbl["partition"] for lbl, _ in series["gaama_ingest_consumer_lag"]}
    assert parts == {str(p) for p in range(settings.topic_partitions)}
    assert lag_alert_value(series, topic) == 0

    admin = connect(settings.redis_url, cluster=settings.redis_cluster)
    try:
        await on_every_primary(admin, "CLIENT", "PAUSE", 120_000, "WRITE")
        writes_paused[0] = True
        records = [
            (conversation_key("lag", f"c{c}"), encode(turn(c, i)))
            for i in range(TURNS // CONVERSATIONS)
            for c in range(CONVERSATIONS)
        ]
        await produce(settings.kafka_bootstrap, topic, records)

        async def backlog() -> float:
            value = lag_alert_value(scrape(ingest.url), topic)
            return value if value >= TURNS else 0

        assert await wait_for(backlog, timeout=30) == TURNS
        # Every metric the alert selects is exported and populated.
        series = scrape(ingest.url)
        for name in wanted:
            assert any(v > 0 for _, v in series[name]), name

        async def retried() -> float:  # the client's 10 s socket timeout, then a retry
            [(_, value)] = scrape(ingest.url)["gaama_ingest_retries_total"]
            return value

        await wait_for(retried, timeout=40)
        assert lag_alert_value(scrape(ingest.url), topic) == TURNS  # stalled, not skipped
    finally:
        await on_every_primary(admin, "CLIENT", "UNPAUSE")
        writes_paused[0] = False
        await admin.aclose()

    async def drained() -> bool:
        return lag_alert_value(scrape(ingest.url), topic) == 0

    await wait_for(drained, timeout=60)
    total = 0
    for c in range(CONVERSATIONS):
        total += len(await graph.chain("lag", f"c{c}"))
    assert total == TURNS
    series = scrape(ingest.url)
    assert sum(v for _, v in series["gaama_ingest_dead_lettered_total"]) == 0
    assert not ingest.log_tail(400).count("Crashed")
