"""``gaama dlq`` end to end on the real broker, Redis and ingest service: a turn over the
ingest's text limit is dead-lettered; ``list`` and ``show`` print it (the value decoded);
``replay --dry-run`` publishes nothing; the operator raises the limit (restarts ingest) and
replays: the original record (key, value, headers — not the envelope) goes back to its topic and
partition, marked ``gaama-replay-of``, and the turn is stored as an episode; a second replay is
a no-op."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from gaama.config import Settings
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, dlq, encode
from gaama.launch import settings_env
from gaama.store.graph import GraphStore
from services.dlq.main import REPLAY_HEADER, parse_since
from tests.support.services import ServiceProcess, read_topic, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def gaama_dlq(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAAMA_")}
    env.update(settings_env(settings))
    env["PYTHONPATH"] = f"{ROOT / 'shared'}:{ROOT}"
    return subprocess.run(
        [sys.executable, "-m", "gaama.cli", "dlq", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _produce(settings: Settings, turn: TurnReceived) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            settings.topic_prefix + TOPIC_TURNS,
            encode(turn),
            key=conversation_key(turn.tenant, turn.conversation),
            headers=[("traceparent", b"00-abc-def-01")],
        )
    finally:
        await producer.stop()


async def test_a_fixed_poison_turn_is_replayed_once_and_stored(
    settings: Settings, topics: list[str], index: object, graph: GraphStore, tmp_path: Path
) -> None:
    text = (
        "The offsite moved to Lisbon, and the budget review moved to the week after. " * 3
    ).strip()
    turn = TurnReceived(
        tenant="acme",
        conversation="c-dlq",
        turn_id="T1",
        speaker="Ann",
        text=text,
        timestamp=datetime(2024, 3, 1, tzinfo=UTC),
    )
    strict = ServiceProcess("ingest", settings, tmp_path, GAAMA_TURN_MAX_CHARS="100").start()
    try:
        await _produce(settings, turn)
        dead = await read_topic(
            settings.kafka_bootstrap, settings.topic_prefix + dlq(TOPIC_TURNS), 1, 60
        )
        assert len(dead) == 1
    finally:
        strict.stop()
    assert await graph.chain("acme", "c-dlq") == []

    listed = gaama_dlq(settings, "list", "--reason", "too_large", "--since", "1h")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.strip().splitlines()
    assert len(lines) == 1, listed.stdout
    coords, _when, source, reason, service = lines[0].split()[:5]
    assert source.startswith(settings.topic_prefix + TOPIC_TURNS + "[")
    assert (reason, service) == ("too_large", "ingest")
    assert gaama_dlq(settings, "list", "--reason", "invalid").stdout == ""

    shown = gaama_dlq(settings, "show", coords)
    assert shown.returncode == 0, shown.stderr
    body = json.loads(shown.stdout)
    assert body["value"]["text"] == text and body["reason"] == "too_large"
    assert "GAAMA_TURN_MAX_CHARS" in body["error"]

    dry = gaama_dlq(settings, "replay", "--dry-run", "--topic", TOPIC_TURNS)
    assert dry.returncode == 0, dry.stderr
    assert "would replay" in dry.stdout and "1 header(s), from the source topic" in dry.stdout
    turns_topic = settings.topic_prefix + TOPIC_TURNS
    assert len(await read_topic(settings.kafka_bootstrap, turns_topic, 2, 5)) == 1

    # The operator's fix: the default limit again; then the replay.
    ingest = ServiceProcess("ingest", settings, tmp_path).start()
    try:
        replayed = gaama_dlq(settings, "replay", "--reason", "too_large")
        assert replayed.returncode == 0, replayed.stderr
        assert replayed.stdout.startswith("replayed "), replayed.stdout
        assert "replayed 1, skipped 0" in replayed.stderr

        async def stored() -> list[str]:
            return await graph.chain("acme", "c-dlq")

        assert len(await wait_for(stored, timeout=60)) == 1

        again = gaama_dlq(settings, "replay", "--reason", "too_large")
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("skip ") and "already replayed" in again.stdout
        assert "replayed 0, skipped 1" in again.stderr
    finally:
        ingest.stop()

    records = await _read_with_headers(settings, turns_topic)
    assert len(records) == 2, records  # the poison turn and its one replay
    (k1, v1, _), (k2, v2, h2) = records
    assert (k2, v2) == (k1, v1)  # the original record, not the DeadLetter envelope
    assert dict(h2)["traceparent"] == b"00-abc-def-01"
    source_ref = source.replace("[", "/").replace("]@", "/")
    assert dict(h2)[REPLAY_HEADER] == source_ref.encode()
    assert await graph.chain("acme", "c-dlq") != []


async def _read_with_headers(settings: Settings, topic: str) -> list[tuple]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    out: list[tuple] = []
    try:
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        while sum(ends.values()) > 0:
            batch = await consumer.getmany(timeout_ms=1000)
            if not batch:
                break
            for msgs in batch.values():
                out += [(m.key, m.value, list(m.headers)) for m in msgs]
    finally:
        await consumer.stop()
    return out


def test_since_takes_iso_times_and_ages() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_since("90m", now) == datetime(2026, 5, 1, 10, 30, tzinfo=UTC)
    assert parse_since("2d", now) == datetime(2026, 4, 29, 12, 0, tzinfo=UTC)
    assert parse_since("2026-05-01T10:00") == datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
