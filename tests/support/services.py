"""Run GAAMA services as real subprocesses for integration tests, and talk to the broker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from gaama.config import Settings, hash_api_key
from gaama.devstack import free_port

ROOT = Path(__file__).resolve().parents[2]


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAAMA_")}
    env.update(
        {
            "GAAMA_REDIS_URL": settings.redis_url,
            "GAAMA_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "GAAMA_KEY_PREFIX": settings.key_prefix,
            "GAAMA_INDEX_NAME": settings.index_name,
            "GAAMA_TOPIC_PREFIX": settings.topic_prefix,
            "GAAMA_TOPIC_PARTITIONS": str(settings.topic_partitions),
            "GAAMA_MAX_RETRIES": str(settings.max_retries),
            "GAAMA_RETRY_BACKOFF_S": str(settings.retry_backoff_s),
            "GAAMA_CHUNK_IDLE_S": str(settings.chunk_idle_s),
            "GAAMA_CHUNK_LOCK_S": str(settings.chunk_lock_s or 5),
            "GAAMA_API_KEYS": json.dumps([k.model_dump() for k in settings.api_keys]),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def api_keys(*pairs: tuple[str, str], disabled: Iterable[str] = ()) -> list[dict[str, Any]]:
    off = set(disabled)
    return [{"key_sha256": hash_api_key(k), "tenant": t, "disabled": k in off} for k, t in pairs]


class ServiceProcess:
    """``python -m services.<name>.main`` on a free port; logs go to a file for diagnosis."""

    def __init__(self, name: str, settings: Settings, log_dir: Path, **env: str) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_dir / f"{name}-{self.port}.log"
        self.env = service_env(settings, **{f"GAAMA_{name.upper()}_PORT": str(self.port)}, **env)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> ServiceProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{self.name}.main"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready in {timeout}s:\n{self.log()}")

    def log(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
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
