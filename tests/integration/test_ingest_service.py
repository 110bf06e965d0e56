"""The ingest service as a real process against the real broker and Redis."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gaama import ids
from gaama.config import Settings
from gaama.events import (
    TOPIC_EPISODES,
    TOPIC_TURNS,
    DeadLetter,
    EpisodeStored,
    TurnReceived,
    conversation_key,
    decode,
    dlq,
    encode,
)
from gaama.store.graph import GraphStore
from tests.support.redis_state import namespace_size
from tests.support.services import ServiceProcess, api_keys, produce, read_topic, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

KEY_A, KEY_B, KEY_OFF = "key-a", "key-b", "key-off"


@pytest.fixture
def ingest_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "api_keys": [
                *[
                    __import__("gaama.config", fromlist=["ApiKey"]).ApiKey(**k)
                    for k in api_keys(
                        (KEY_A, "tenant-a"),
                        (KEY_B, "tenant-b"),
                        (KEY_OFF, "tenant-c"),
                        disabled=[KEY_OFF],
                    )
                ]
            ]
        }
    )


@pytest.fixture
def ingest(
    ingest_settings: Settings, topics: list[str], index, tmp_path: Path
) -> Iterator[ServiceProcess]:
    svc = ServiceProcess("ingest", ingest_settings, tmp_path).start()
    yield svc
    svc.stop()


def turn(tenant: str, conv: str, i: int, text: str | None = None) -> TurnReceived:
    return TurnReceived(
        tenant=tenant,
        conversation=conv,
        turn_id=f"D1:{i}",
        speaker="Ann",
        text=text or f"turn number {i} of {conv}",
        timestamp=f"2023-05-08T13:{i % 60:02d}:00Z",
    )


def t(settings: Settings, base: str) -> str:
    return settings.topic_prefix + base


async def test_chain_order_redelivery_and_tenants(
    ingest, ingest_settings: Settings, graph: GraphStore
):
    s = ingest_settings
    convs = [f"conv-{c}" for c in range(6)]  # spread over the 4 partitions
    records = []
    for i in range(12):
        for c in convs:
            records.append(turn("tenant-a", c, i))
    # tenant-b uses the same conversation ids and the same texts
    records += [turn("tenant-b", convs[0], i) for i in range(12)]
    payload = [(conversation_key(r.tenant, r.conversation), encode(r)) for r in records]
    await produce(s.kafka_bootstrap, t(s, TOPIC_TURNS), payload)

    async def chains_complete():
        for c in convs:
            if len(await graph.chain("tenant-a", c)) < 12:
                return False
        return len(await graph.chain("tenant-b", convs[0])) == 12

    await wait_for(chains_complete, timeout=90)
    for c in convs:
        expected = [ids.episode_id("tenant-a", c, f"D1:{i}") for i in range(12)]
        assert await graph.chain("tenant-a", c) == expected
        # NEXT edges follow the same order
        adj = await graph.neighbours("tenant-a", expected)
        for a, b in itertools.pairwise(expected):
            assert any(n.node == b and n.outgoing and n.kind.value == "NEXT" for n in adj[a])
    b_chain = await graph.chain("tenant-b", convs[0])
    assert set(b_chain).isdisjoint(await graph.chain("tenant-a", convs[0]))
    assert await graph.get_nodes("tenant-a", b_chain) == {}

    # Redelivery: the same 84 turns again change nothing.
    before = await namespace_size(graph)
    await produce(s.kafka_bootstrap, t(s, TOPIC_TURNS), payload)
    events = await read_topic(s.kafka_bootstrap, t(s, TOPIC_EPISODES), 2 * len(payload), 90)
    assert len(events) == 2 * len(payload)
    assert await namespace_size(graph) == before
    for c in convs:
        assert len(await graph.chain("tenant-a", c)) == 12
    stored = {decode(EpisodeStored, v).episode_id for _, v in events}
    assert len(stored) == len(payload)
    metrics = httpx.get(f"{ingest.url}/metrics").text
    assert 'gaama_ingest_stored_total{kind="episode"} 84.0' in metrics


async def test_poison_messages_reach_dlq_with_reason(
    ingest, ingest_settings: Settings, graph: GraphStore
):
    s = ingest_settings
    good = [turn("tenant-a", "c", i) for i in range(3)]
    bad_body = turn("tenant-a", "c", 99)
    records = [
        (conversation_key("tenant-a", "c"), encode(good[0])),
        (conversation_key("tenant-a", "c"), b"{not json"),
        (conversation_key("tenant-a", "c"), json.dumps({"tenant": "tenant-a"}).encode()),
        (conversation_key("tenant-a", "c"), encode(good[1])),
        (conversation_key("tenant-b", "c"), encode(bad_body)),  # key/body tenant mismatch
        (None, encode(good[2])),  # no key
        (conversation_key("tenant-a", "c"), encode(good[2])),
    ]
    await produce(s.kafka_bootstrap, t(s, TOPIC_TURNS), records)
    letters = await read_topic(s.kafka_bootstrap, t(s, dlq(TOPIC_TURNS)), 4, 60)
    reasons = sorted(decode(DeadLetter, v).reason for _, v in letters)
    assert reasons == ["invalid", "invalid", "invalid", "tenant_mismatch"]
    errors = " | ".join(decode(DeadLetter, v).error for _, v in letters)
    assert "not valid JSON" in errors and "conversation: Field required" in errors
    assert "malformed key" in errors or "no key" in errors
    first = decode(DeadLetter, letters[0][1])
    assert first.source_topic == t(s, TOPIC_TURNS) and first.offset is not None
    chain = await wait_for(lambda: _chain_len(graph, "tenant-a", "c", 3))
    assert chain == [ids.episode_id("tenant-a", "c", f"D1:{i}") for i in range(3)]


async def _chain_len(graph: GraphStore, tenant: str, conv: str, n: int) -> list[str] | None:
    chain = await graph.chain(tenant, conv)
    return chain if len(chain) >= n else None


async def test_http_turns_validation_and_auth(ingest, graph: GraphStore):
    url = f"{ingest.url}/v1/turns"
    ok = {
        "conversation": "web",
        "turn_id": "1",
        "speaker": "Ann",
        "text": "hello there",
        "timestamp": "2023-05-08T13:56:00Z",
    }
    h = {"X-API-Key": KEY_A}
    r = httpx.post(url, json=ok)
    assert r.status_code == 401 and "missing API key" in r.json()["error"]
    assert httpx.post(url, json=ok, headers={"X-API-Key": "nope"}).status_code == 401
    r = httpx.post(url, json=ok, headers={"Authorization": f"Bearer {KEY_OFF}"})
    assert r.status_code == 403 and "disabled" in r.json()["error"]
    cases = {
        "speaker": ({k: v for k, v in ok.items() if k != "speaker"}, "speaker: Field required"),
        "empty": ({**ok, "text": "   "}, "text is empty"),
        "ts": ({**ok, "timestamp": "next tuesday"}, "not an ISO 8601 timestamp"),
        "extra": ({**ok, "tenant": "tenant-b"}, "tenant: Extra inputs are not permitted"),
        "empty-batch": ({"turns": []}, "turns: List should have at least 1 item"),
    }
    for name, (body, message) in cases.items():
        r = httpx.post(url, json=body, headers=h)
        assert r.status_code == 422, name
        assert message in r.json()["error"], (name, r.json())
    r = httpx.post(url, json={**ok, "text": "x" * 9000}, headers=h)
    assert r.status_code == 413 and "limit is 8000" in r.json()["error"]
    r = httpx.post(url, content=b"{oops", headers=h)
    assert r.status_code == 400
    r = httpx.post(url, json={"turns": [ok, {**ok, "turn_id": "2", "text": "second"}]}, headers=h)
    assert r.status_code == 202
    expected = [ids.episode_id("tenant-a", "web", "1"), ids.episode_id("tenant-a", "web", "2")]
    assert r.json() == {"accepted": 2, "episode_ids": expected}
    assert await wait_for(lambda: _chain_len(graph, "tenant-a", "web", 2)) == expected
    health = httpx.get(f"{ingest.url}/healthz").json()
    assert health == {"status": "ok", "dependencies": {"redis": "ok", "broker": "ok"}}


def test_the_worker_keeps_faust_data_out_of_the_working_directory(
    ingest: ServiceProcess, ingest_settings: Settings
):
    """faust makes a data directory even without Tables; it must not land in the directory the
    service was started from (every test and benchmark run, each with its own app id, would
    leave one behind)."""
    app_id = f"{ingest_settings.topic_prefix}gaama-ingest"
    assert not (Path.cwd() / f"{app_id}-data").exists()
    assert (Path(tempfile.gettempdir()) / "gaama-faust" / app_id).is_dir()
