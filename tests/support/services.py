"""Run GAAMA services as real subprocesses for integration tests, and talk to the broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gaama import launch
from gaama.config import Settings, hash_api_key


def api_keys(*pairs: tuple[str, str], disabled: Iterable[str] = ()) -> list[dict[str, Any]]:
    off = set(disabled)
    return [{"key_sha256": hash_api_key(k), "tenant": t, "disabled": k in off} for k, t in pairs]


class ServiceProcess(launch.ServiceProcess):
    """A service in the test's namespace; hermetic (no GAAMA_* from the outer environment).

    The chunk lock is short so a test that kills the extract worker sees its chunk closed soon.
    """

    def __init__(self, name: str, settings: Settings, log_dir: Path, **env: str) -> None:
        extra = {"GAAMA_CHUNK_LOCK_S": str(settings.chunk_lock_s or 5), **env}
        super().__init__(name, settings, log_dir, extra=extra)


async def produce(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], **options: Any
) -> None:
    """Write ``records`` (key, value) to ``topic``; ``options`` are aiokafka's (security)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **options)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, value=value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


async def read_topic(
    bootstrap: str, topic: str, expect: int, timeout: float = 60
) -> list[tuple[bytes | None, bytes]]:
    """Read a topic from the start (no consumer group) until ``expect`` records or timeout."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        group_id=None,
    )
    await consumer.start()
    out: list[tuple[bytes | None, bytes]] = []
    try:
        await consumer.topics()  # fetch metadata: partitions are unknown until then
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for msgs in batch.values():
                out += [(m.key, m.value) for m in msgs]
    finally:
        await consumer.stop()
    return out


async def wait_for(predicate: Any, timeout: float = 60, interval: float = 0.25) -> Any:
    """Await ``predicate()`` until it returns something truthy; return it or raise."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await predicate()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met in {timeout}s (last value {last!r})")
