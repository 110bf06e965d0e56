"""Compressed turns as producers send them: every codec decodes, and a batch that still cannot
be decoded is dead-lettered (reason ``undecodable``, the raw batch kept) while the turns after
it are stored: the consumer never stops on it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.record.memory_records import MemoryRecords

from gaama import ids
from gaama.config import Settings
from gaama.events import (
    TOPIC_TURNS,
    DeadLetter,
    TurnReceived,
    conversation_key,
    decode,
    dlq,
    encode,
)
from gaama.store.graph import GraphStore
from tests.support.services import ServiceProcess, read_topic, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def turn(conv: str, i: int) -> TurnReceived:
    return TurnReceived(
        tenant="tenant-a",
        conversation=conv,
        turn_id=f"D1:{i}",
        speaker="Ann",
        text=f"turn {i} of {conv}, compressed or not",
        timestamp=f"2023-05-08T13:{i:02d}:00Z",
    )


async def send_batches(s: Settings, batches: list[tuple[str, list[TurnReceived]]]) -> None:
    """Each item one record batch of its own, compressed with its codec, in order."""
    topic = s.topic_prefix + TOPIC_TURNS
    for codec, turns in batches:
        producer = AIOKafkaProducer(
            bootstrap_servers=s.kafka_bootstrap_servers,
            acks="all",
            compression_type=None if codec == "none" else codec,
            linger_ms=50,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic, encode(t), key=conversation_key(t.tenant, t.conversation)
                )
                for t in turns
            ]
            for f in futures:
                await f
        finally:
            await producer.stop()


def chain_of(graph: GraphStore, conv: str, n: int):
    async def check() -> list[str] | None:
        chain = await graph.chain("tenant-a", conv)
        return chain if len(chain) >= n else None

    return check


@pytest.fixture
def ingest(
    settings: Settings, topics: list[str], index, tmp_path: Path
) -> Iterator[ServiceProcess]:
    svc = ServiceProcess("ingest", settings, tmp_path).start()
    yield svc
    svc.stop()


@pytest.fixture
def ingest_without_codecs(
    settings: Settings, topics: list[str], index, tmp_path: Path
) -> Iterator[ServiceProcess]:
    """Ingest in a process where cramjam (snappy, lz4, zstd) cannot be imported: a consumer
    whose codec library is missing, as every consumer was before the codecs were dependencies."""
    shim = tmp_path / "no-codecs" / "cramjam"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ImportError("cramjam is hidden by the test")\n')
    path = os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")])
    svc = ServiceProcess("ingest", settings, tmp_path, PYTHONPATH=path).start()
    yield svc
    svc.stop()


async def test_every_codec_decodes(ingest: ServiceProcess, settings: Settings, graph: GraphStore):
    batches = [
        (c, [turn("codecs", 2 * k), turn("codecs", 2 * k + 1)]) for k, c in enumerate(CODECS)
    ]
    await send_batches(settings, batches)
    chain = await wait_for(chain_of(graph, "codecs", 2 * len(CODECS)), timeout=60)
    assert chain == [ids.episode_id("tenant-a", "codecs", f"D1:{i}") for i in range(10)]
    metrics = httpx.get(f"{ingest.url}/metrics").text
    assert 'gaama_ingest_dead_lettered_total{reason="undecodable"} 0.0' in metrics


async def test_undecodable_batches_are_dead_lettered_and_consumption_goes_on(
    ingest_without_codecs: ServiceProcess, settings: Settings, graph: GraphStore
):
    s = settings
    t = [turn("mixed", i) for i in range(7)]
    batches = [
        ("none", [t[0]]),
        ("snappy", [t[1]]),
        ("lz4", [t[2], t[3]]),
        ("zstd", [t[4]]),
        ("gzip", [t[5]]),
        ("none", [t[6]]),
    ]
    await send_batches(s, batches)
    letters = [
        decode(DeadLetter, v)
        for _, v in await read_topic(s.kafka_bootstrap, s.topic_prefix + dlq(TOPIC_TURNS), 3, 60)
    ]
    assert [d.reason for d in letters] == ["undecodable"] * 3
    for letter, codec in zip(letters, ("snappy", "lz4", "zstd"), strict=True):
        assert letter.source_topic == s.topic_prefix + TOPIC_TURNS
        assert codec in letter.error and "cannot be decoded" in letter.error
        assert letter.service == "ingest"
    # The lz4 batch held two turns: one letter names both offsets.
    assert "offsets" in letters[1].error
    first, _, last = letters[1].error.split("offsets ")[1].split(" ")[0].partition("..")
    assert int(last) == int(first) + 1 == letters[1].offset + 1
    # The raw batch is kept: decoded here (where the codec is present) it holds the turns.
    raw = MemoryRecords(letters[1].original_value()).next_batch()
    assert [decode(TurnReceived, r.value).turn_id for r in raw] == ["D1:2", "D1:3"]
    # Turns after the bad batches are stored; the consumer is alive.
    chain = await wait_for(chain_of(graph, "mixed", 3), timeout=60)
    assert chain == [ids.episode_id("tenant-a", "mixed", f"D1:{i}") for i in (0, 5, 6)]
    assert httpx.get(f"{ingest_without_codecs.url}/healthz").status_code == 200
    metrics = httpx.get(f"{ingest_without_codecs.url}/metrics").text
    assert 'gaama_ingest_dead_lettered_total{reason="undecodable"} 3.0' in metrics
