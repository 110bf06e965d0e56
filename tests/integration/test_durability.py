"""Durable before acknowledged (GAAMA_DURABILITY): the wait a consumer does before it commits,
against real Redis servers — including one killed with SIGKILL and restarted from its AOF, which
must still hold every episode whose batch was acknowledged."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from gaama import devstack
from gaama.config import Settings
from gaama.devstack import processes
from gaama.errors import ConfigError, StoreUnavailable
from gaama.events import TOPIC_TURNS, conversation_key
from gaama.store import connect
from gaama.store.durability import Durability
from gaama.store.graph import GraphStore
from services.ingest.handlers import IngestDeps, handle
from tests.component.test_forget_cascade import C1, C2, turns
from tests.support.stream import record

pytestmark = pytest.mark.requires_stack


async def test_wait_returns_once_fsynced_and_none_is_a_no_op(graph: GraphStore) -> None:
    await Durability(graph.redis, graph.keys.durability_marker, "aof").wait()
    await Durability(graph.redis, "unused", "none").wait()


async def test_missing_replicas_are_an_outage_not_a_pass(graph: GraphStore) -> None:
    d = Durability(graph.redis, graph.keys.durability_marker, "replicas", timeout_s=0.1)
    with pytest.raises(StoreUnavailable, match="replicas 0/1"):
        await d.wait()


async def test_redis_without_aof_is_a_config_error(tmp_path: Path) -> None:
    port = devstack.free_port()
    pid = processes.start_redis(tmp_path, port)
    client = connect(f"redis://127.0.0.1:{port}/0")
    try:
        processes.wait_redis(port, pid, tmp_path / "redis.log")
        await client.config_set("appendonly", "no")  # a server of our own: nothing shared
        with pytest.raises(ConfigError, match="appendonly"):
            await Durability(client, "gaama:durability", "aof").wait()
    finally:
        await client.aclose()
        os.kill(pid, signal.SIGKILL)


async def test_acknowledged_turns_survive_a_redis_sigkill(
    settings: Settings, embedder, tmp_path: Path
) -> None:
    port = devstack.free_port()
    pid = processes.start_redis(tmp_path, port)
    url = f"redis://127.0.0.1:{port}/0"
    processes.wait_redis(port, pid, tmp_path / "redis.log")
    client = connect(url)
    s = settings.model_copy(update={"redis_url": url})
    graph = GraphStore(client, settings_keys(s))
    deps = IngestDeps(s, graph, embedder)
    durable = Durability(client, graph.keys.durability_marker, "aof")
    acknowledged: list[str] = []
    try:
        for i, lines in enumerate((C1, C2, C1)):
            batch = turns("acme", f"c{i}", lines)
            recs = [
                record(TOPIC_TURNS, conversation_key(t.tenant, t.conversation), t) for t in batch
            ]
            result = await handle(recs, deps)
            assert not result.failed
            await durable.wait()  # what the runtime does before it commits the batch
            acknowledged += [o.event.episode_id for o in result.out]  # type: ignore[attr-defined]
        os.kill(pid, signal.SIGKILL)  # no shutdown, no final fsync
        await client.aclose()
        pid = processes.start_redis(tmp_path, port)  # the same directory: it reloads the AOF
        processes.wait_redis(port, pid, tmp_path / "redis.log")
        client = connect(url)
        graph = GraphStore(client, settings_keys(s))
        assert await graph.existing("acme", acknowledged) == set(acknowledged)
    finally:
        await client.aclose()
        os.kill(pid, signal.SIGKILL)


def settings_keys(s: Settings):
    from gaama.store.keys import Keys

    return Keys(s.key_prefix)
