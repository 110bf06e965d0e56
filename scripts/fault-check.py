"""Fault check: the pipeline under a 15 s Redis pause and a SIGKILL of extract, compared with a
clean run of the same 600 turns (episodes, facts and their NEXT / DERIVED_FROM edges must be
equal; nothing dead-lettered; no worker exits on the outage). A first step towards `make chaos`.

Usage (from the repo root): PYTHONPATH=. .venv/bin/python scripts/fault-check.py
"""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from benchmarks.synthetic import turn_texts
from gaama import devstack
from gaama.config import load_settings
from gaama.devstack import create_topics
from gaama.events import (
    TOPIC_TURNS,
    TOPICS,
    TurnReceived,
    conversation_key,
    dlq,
    encode,
    topic_name,
)
from gaama.launch import ServiceProcess
from gaama.store import connect
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys

TENANTS, CONVS, PER = 3, 2, 100
LOCK = {"GAAMA_CHUNK_LOCK_S": "5"}  # a killed worker's chunk is free again soon


def turns() -> list[TurnReceived]:
    texts = turn_texts(TENANTS * CONVS * PER, seed=7)
    out, k = [], 0
    base = datetime(2024, 3, 1, tzinfo=UTC)
    for i in range(PER):
        for t in range(TENANTS):
            for c in range(CONVS):
                out.append(
                    TurnReceived(
                        tenant=f"t{t}",
                        conversation=f"c{c}",
                        turn_id=f"T:{i}",
                        speaker=("Ann", "Bob")[i % 2],
                        text=texts[k],
                        timestamp=base + timedelta(minutes=i),
                        end_of_session=(i + 1) % 25 == 0,
                    )
                )
                k += 1
    return out


async def produce(boot: str, topic: str, ts: list[TurnReceived]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=boot, acks="all")
    await p.start()
    for t in ts:
        await p.send(topic, encode(t), key=conversation_key(t.tenant, t.conversation))
    await p.flush()
    await p.stop()


async def dlq_count(boot: str, prefix: str) -> int:
    c = AIOKafkaConsumer(bootstrap_servers=boot, group_id=None, auto_offset_reset="earliest")
    await c.start()
    n = 0
    try:
        await c.topics()
        for base in TOPICS:
            name = topic_name(dlq(base), prefix)
            for p in c.partitions_for_topic(name) or ():
                tp = TopicPartition(name, p)
                c.assign([tp])
                await c.seek_to_end(tp)
                n += await c.position(tp)
    finally:
        await c.stop()
    return n


async def snapshot(graph: GraphStore):
    nodes, edges = set(), set()
    for t in range(TENANTS):
        tenant = f"t{t}"
        for c in range(CONVS):
            chain = await graph.chain(tenant, f"c{c}")
            got = await graph.get_nodes(tenant, chain)
            if len(chain) != PER or not all("chunk" in n.extra for n in got.values()):
                return None
            adj = await graph.neighbours(tenant, chain)
            for e, nbs in adj.items():
                nodes.add(e)
                for nb in nbs:
                    if nb.kind.value in ("NEXT", "DERIVED_FROM"):
                        edges.add((e, nb.node, nb.kind.value))
                        nodes.add(nb.node)
    return nodes, edges


async def run(stack, faults: bool) -> tuple:
    prefix = f"chaos{'f' if faults else 'c'}{int(time.time()) % 100000}"
    s = load_settings(
        redis_url=stack.redis_url,
        kafka_bootstrap=stack.kafka_bootstrap,
        key_prefix=prefix,
        index_name=f"{prefix}-idx",
        topic_prefix=f"{prefix}.",
        chunk_idle_s=3.0,
    )
    await create_topics(s.kafka_bootstrap, s.topic_partitions, s.topic_prefix)
    client = connect(s.redis_url)
    graph = GraphStore(client, Keys(prefix))
    log = Path(tempfile.mkdtemp(prefix="chaos-"))
    procs = {
        n: ServiceProcess(n, s, log, extra={"GAAMA_CHUNK_LOCK_S": "5"}).start()
        for n in ("ingest", "extract", "reflect")
    }
    started = time.time()
    await produce(s.kafka_bootstrap, topic_name(TOPIC_TURNS, s.topic_prefix), turns())
    exited = []
    if faults:
        await asyncio.sleep(4)
        admin = connect(s.redis_url)
        await admin.execute_command("CLIENT", "PAUSE", 15000, "ALL")
        print("# redis paused 15 s", file=sys.stderr)
        await asyncio.sleep(16)
        await admin.aclose()
        exited += [n for n, p in procs.items() if not p.alive()]
        procs["extract"].kill(signal.SIGKILL)
        print("# extract killed", file=sys.stderr)
        await asyncio.sleep(1)
        procs["extract"] = ServiceProcess(
            "extract", s, log, extra={"GAAMA_CHUNK_LOCK_S": "5"}
        ).start()
    snap = None
    for _ in range(300):
        snap = await snapshot(graph)
        if snap is not None:
            await asyncio.sleep(8)
            again = await snapshot(graph)
            if again == snap:
                break
            snap = again
        await asyncio.sleep(2)
    drain = time.time() - started
    exited += [n for n, p in procs.items() if not p.alive()]
    for p in procs.values():
        p.stop()
    dead = await dlq_count(s.kafka_bootstrap, s.topic_prefix)
    await client.aclose()
    return snap, dead, exited, drain, log


async def main(stack) -> None:
    clean, dead_c, _, drain_c, _ = await run(stack, False)
    faulty, dead_f, exited, drain_f, log = await run(stack, True)
    for name, (nodes, edges), dead, drain in (
        ("clean", clean, dead_c, drain_c),
        ("faults", faulty, dead_f, drain_f),
    ):
        print(f"{name}: {len(nodes)} nodes, {len(edges)} edges, dlq {dead}, drain {drain:.0f}s")
    print("workers that exited during the outage:", exited or "none")
    print("equal nodes:", clean[0] == faulty[0], "equal edges:", clean[1] == faulty[1])
    print("logs:", log)


_stack = devstack.start_stack(Path(tempfile.mkdtemp()), devstack.free_port(), devstack.free_port())
try:
    asyncio.run(main(_stack))
finally:
    _stack.stop()
