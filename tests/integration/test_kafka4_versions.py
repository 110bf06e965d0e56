"""No client of the services sends a request version Apache Kafka 4 no longer serves (KIP-896):
their clients run through a proxy that records every request's (api_key, api_version)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from gaama.config import Settings
from gaama.devstack import create_topics
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key
from services.runtime.producer import EventProducer
from tests.support.broker import fronted_broker
from tests.support.services import ServiceProcess, wait_for

pytestmark = [pytest.mark.requires_stack, pytest.mark.slow]


async def test_service_clients_send_only_versions_kafka4_serves(
    settings: Settings, index, graph, tmp_path: Path
):
    with fronted_broker(tmp_path / "broker") as proxy:
        s = settings.model_copy(update={"kafka_bootstrap": proxy.address})
        await create_topics(s.kafka_bootstrap, s.topic_partitions, s.topic_prefix)  # admin
        ingest = ServiceProcess("ingest", s, tmp_path).start()  # faust consumer + producer
        try:
            turn = TurnReceived(
                tenant="tenant-a",
                conversation="v",
                turn_id="1",
                speaker="Ann",
                text="hello",
                timestamp="2023-05-08T13:00:00Z",
            )
            producer = EventProducer(s)  # the HTTP endpoints' producer
            await producer.send(TOPIC_TURNS, conversation_key("tenant-a", "v"), turn)
            await producer.aclose()
            await wait_for(lambda: graph.chain("tenant-a", "v"), timeout=60)
            await asyncio.sleep(s.lag_interval_s + 1)  # a lag refresh (ListOffsets)
        finally:
            ingest.stop()
        seen = {key for key, _ in proxy.seen}
        assert {0, 1, 2, 3, 8, 9, 10, 11, 19} <= seen  # produce, fetch, offsets, group, admin
        assert proxy.removed_versions() == []


async def test_the_check_catches_a_removed_version(tmp_path: Path):
    """A Produce v2 frame (removed in Kafka 4) is reported."""
    with fronted_broker(tmp_path / "broker") as proxy:
        host, _, port = proxy.address.partition(":")
        _reader, writer = await asyncio.open_connection(host, int(port))
        client = b"probe"
        body = struct.pack(">hi", 1, 1000) + struct.pack(">i", 0)  # acks, timeout, no topics
        head = struct.pack(">hhih", 0, 2, 7, len(client)) + client
        writer.write(struct.pack(">i", len(head) + len(body)) + head + body)
        await writer.drain()
        await wait_for(lambda: _seen(proxy), timeout=5)
        writer.close()
        assert proxy.removed_versions() == ["Produce (api 0) v2 x1; Kafka 4 serves v3+"]


async def _seen(proxy) -> bool:
    return bool(proxy.seen)
