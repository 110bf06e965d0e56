"""Durable before acknowledged (GAAMA_DURABILITY): the wait a consumer does before it commits,
against real Redis servers — including one killed with SIGKILL and restarted from its AOF, which
must still hold every episode whose batch was acknowledged."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gaama import devstack
from gaama.config import Settings
from gaama.devstack import processes
from gaama.episodes import episode_node
from gaama.errors import ConfigError, StoreUnavailable
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, decode
from gaama.store import connect
from gaama.store.durability import Durability
from gaama.store.graph import GraphStore
from services.ingest.handlers import IngestDeps, handle
from services.runtime.acks import run_batches
from services.runtime.records import BatchResult, Record
from services.runtime.shutdown import Drain
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
            await result.make_writes()  # what the runtime does behind the next batch
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


class Held:
    """An event as faust's take_events yields it: the record, and the message's ack state."""

    def __init__(self, record: Record, batch: int) -> None:
        self.record = record
        self.batch = batch
        self.message = SimpleNamespace(acked=False)


@pytest.mark.parametrize("depth", [1, 2])
async def test_a_crash_between_write_and_commit_replays_without_duplicates(
    settings: Settings, embedder, tmp_path: Path, depth: int
) -> None:
    """The consumer's pipeline (run_batches) with the real ingest handler and fsync wait: Redis
    is SIGKILLed after a batch's writes and before its acknowledgement (its fsync wait fails, as
    a crash of the consumer there would leave it); after a restart from the AOF, the batches
    after the last acknowledged one are delivered again, as the broker would. Every acknowledged
    turn is kept and every conversation's chain holds each turn once, in order. With ``depth``
    2 the batch before the crashed one may still be waiting for its fsync: it is not
    acknowledged either, and is delivered again."""
    port = devstack.free_port()
    pid = processes.start_redis(tmp_path, port)
    url = f"redis://127.0.0.1:{port}/0"
    processes.wait_redis(port, pid, tmp_path / "redis.log")
    s = settings.model_copy(update={"redis_url": url})
    convs = {"c0": turns("acme", "c0", C1 * 2), "c1": turns("acme", "c1", C2 * 2)}
    mixed = [t for pair in zip(*convs.values(), strict=False) for t in pair]
    records = [record(TOPIC_TURNS, conversation_key(t.tenant, t.conversation), t) for t in mixed]
    batches = [records[i : i + 3] for i in range(0, len(records), 3)]
    assert len(batches) >= 4
    crash_at = 2
    acked: list[int] = []  # batch numbers, in the order acknowledged
    fsynced: list[int] = []

    async def consume(client: Any, first: int, crash: int | None) -> None:
        graph = GraphStore(client, settings_keys(s))
        deps = IngestDeps(s, graph, embedder)
        durable = Durability(client, graph.keys.durability_marker, "aof")

        async def take() -> Any:
            for n in range(first, len(batches)):
                yield [Held(r, n) for r in batches[n]]

        async def prepare(events: list[Held]) -> BatchResult:
            return await handle([e.record for e in events], deps)

        async def write(events: list[Held], result: BatchResult) -> None:
            await result.make_writes()
            assert not result.failed

        async def fsync(events: list[Held], result: BatchResult) -> None:
            n = events[0].batch
            if n == crash:  # the batch is written; kill Redis before its fsync is confirmed
                os.kill(pid, signal.SIGKILL)
            await durable.wait()
            fsynced.append(n)

        async def publish(events: list[Held], result: BatchResult) -> None:
            assert events[0].batch in fsynced

        await run_batches(
            take(),
            Drain(30),
            prepare,
            fsync,
            publish,
            lambda ev: acked.append(ev[0].batch),
            depth,
            write,
        )

    client = connect(url)
    try:
        with pytest.raises(StoreUnavailable):
            await consume(client, 0, crash_at)
        await client.aclose()
        # nothing past the crash; with two behind, perhaps not the batch before it either
        assert acked == list(range(len(acked)))
        assert crash_at - depth + 1 <= len(acked) <= crash_at
        assert set(acked) <= set(fsynced)
        pid = processes.start_redis(tmp_path, port)  # the same directory: it reloads the AOF
        processes.wait_redis(port, pid, tmp_path / "redis.log")
        client = connect(url)
        kept = GraphStore(client, settings_keys(s))
        first_batches = [r for b in batches[: len(acked)] for r in b]
        ids = [episode_node(decode(TurnReceived, r.value)).id for r in first_batches]
        assert await kept.existing("acme", ids) == set(ids)  # acknowledged: durable
        await consume(client, len(acked), None)  # redelivered from the committed offset
        assert acked == list(range(len(batches)))
        for conv, sent in convs.items():
            want = [episode_node(t).id for t in sent]
            assert await kept.chain("acme", conv) == want  # each turn once, in order
    finally:
        await client.aclose()
        os.kill(pid, signal.SIGKILL)
