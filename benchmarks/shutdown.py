"""``python -m benchmarks shutdown``: how long SIGTERM takes to end each service, mid-stream.

Starts the embedded stack and the four services as subprocesses (offline extractor), sends
``--turns`` turns over 4 tenants through the broker and, while they flow, SIGTERMs ingest,
extract and reflect one after another (each restarted at once), then the query service while
``--searches`` searches are in flight, then each consumer again once the pipeline is idle.
Reported per service: the exit code and the seconds from SIGTERM to exit (the grace is
``GAAMA_SHUTDOWN_GRACE_S``, default 30), the query service's in-flight searches answered, and
whether every turn ended up as exactly one episode. JSON in ``bench-results/shutdown.json``;
``--write-docs`` updates the section in docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from benchmarks.query import machine_info, publish, servers
from benchmarks.synthetic import turn_texts
from gaama.config import ApiKey, Settings, hash_api_key, load_settings
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, encode, topic_name
from gaama.launch import ServiceProcess
from gaama.store import connect
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys

if TYPE_CHECKING:
    from benchmarks import SubParsers

DOCS_BEGIN, DOCS_END = "<!-- shutdown:begin -->", "<!-- shutdown:end -->"
TENANTS = ("t0", "t1", "t2", "t3")
KEY = "bench-shutdown-key"


def _turns(n: int) -> list[TurnReceived]:
    texts = turn_texts(n, seed=11)
    base = datetime(2024, 3, 1, tzinfo=UTC)
    return [
        TurnReceived(
            tenant=TENANTS[i % len(TENANTS)],
            conversation="c",
            turn_id=f"T{i // len(TENANTS)}",
            speaker=("Ann", "Bob")[i % 2],
            text=text,
            timestamp=base + timedelta(minutes=i // len(TENANTS)),
            end_of_session=(i // len(TENANTS)) % 25 == 24,
        )
        for i, text in enumerate(texts)
    ]


async def _produce(settings: Settings, turns: list[TurnReceived]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        topic = topic_name(TOPIC_TURNS, settings.topic_prefix)
        for t in turns:
            await producer.send(topic, encode(t), key=conversation_key(t.tenant, t.conversation))
        await producer.flush()
    finally:
        await producer.stop()


async def _sigterm(proc: ServiceProcess) -> dict[str, Any]:
    assert proc.proc is not None
    started = time.perf_counter()
    os.killpg(proc.proc.pid, signal.SIGTERM)
    code = await asyncio.to_thread(proc.proc.wait, 300)
    return {"exit_code": code, "seconds": round(time.perf_counter() - started, 2)}


async def _episodes(graph: GraphStore) -> list[list[str]]:
    return [await graph.chain(t, "c") for t in TENANTS]


async def _query_in_flight(query: ServiceProcess, searches: int) -> dict[str, Any]:
    """SIGTERM the query service while ``searches`` searches are in flight."""
    texts = turn_texts(searches, seed=12)
    async with httpx.AsyncClient(base_url=query.url, timeout=60) as c:

        async def search(text: str) -> int:
            try:
                r = await c.post(
                    "/v1/search", json={"query": text}, headers={"Authorization": f"Bearer {KEY}"}
                )
            except httpx.HTTPError:
                return 0
            return r.status_code

        calls = [asyncio.create_task(search(t)) for t in texts]
        await asyncio.sleep(0.05)  # sent, not answered yet
        stop = await _sigterm(query)
        codes = await asyncio.gather(*calls)
    return {**stop, "in_flight": searches, "answered_200": sum(c == 200 for c in codes)}


async def _run(opts: argparse.Namespace, redis_url: str, bootstrap: str) -> dict[str, Any]:
    from gaama.devstack import create_topics

    prefix = f"gshut{uuid.uuid4().hex[:6]}"
    settings = load_settings(
        redis_url=redis_url,
        kafka_bootstrap=bootstrap,
        key_prefix=prefix,
        index_name=f"{prefix}-idx",
        topic_prefix=f"{prefix}.",
        api_keys=[ApiKey(key_sha256=hash_api_key(KEY), tenant=TENANTS[0])],
    )
    await create_topics(bootstrap, settings.topic_partitions, settings.topic_prefix)
    client = connect(redis_url, socket_timeout=30)
    graph = GraphStore(client, Keys(prefix))
    log_dir = Path(tempfile.mkdtemp(prefix="gaama-bench-shutdown-"))
    procs = {n: ServiceProcess(n, settings, log_dir) for n in ("ingest", "extract", "reflect")}
    procs["query"] = ServiceProcess("query", settings, log_dir)
    turns = _turns(opts.turns)
    mid: dict[str, Any] = {}
    idle: dict[str, Any] = {}
    try:
        for p in procs.values():
            await p.astart(180)
        sending = asyncio.create_task(_produce(settings, turns))
        for name in ("ingest", "extract", "reflect"):
            await asyncio.sleep(opts.every)
            stored = sum(map(len, await _episodes(graph)))
            mid[name] = {**await _sigterm(procs[name]), "episodes_before": stored}
            procs[name] = await ServiceProcess(name, settings, log_dir).astart(180)
        await sending
        deadline = time.monotonic() + 600
        while sum(map(len, await _episodes(graph))) < len(turns):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        chains = await _episodes(graph)
        mid["query"] = await _query_in_flight(procs["query"], opts.searches)
        for name in ("ingest", "extract", "reflect"):
            idle[name] = await _sigterm(procs[name])
    finally:
        for p in procs.values():
            p.stop()
        for t in TENANTS:
            await graph.delete_tenant(t)
        await client.aclose()
    episodes = sum(map(len, chains))
    return {
        "turns": len(turns),
        "episodes": episodes,
        "duplicates": sum(len(c) - len(set(c)) for c in chains),
        "grace_s": settings.shutdown_grace_s,
        "mid_stream": mid,
        "idle": idle,
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
    }


def docs_section(doc: dict[str, Any]) -> str:
    mid, idle = doc["mid_stream"], doc["idle"]
    lines = [
        "### Measured shutdown times",
        "",
        f"`{doc['command']}` ({doc['date'][:16].replace('T', ' ')} UTC, "
        f"{doc['machine'].get('cpus', '?')} CPUs shared with other work; grace "
        f"{doc['grace_s']:g} s, offline extractor): {doc['turns']:,} turns over 4 tenants, each "
        "consumer SIGTERMed while they flowed and restarted at once, the query service with "
        "searches in flight, each consumer again once idle.",
        "",
        "| service | SIGTERM mid-stream → exit (s) | exit code | idle → exit (s) |",
        "|---|---|---|---|",
    ]
    for name in ("ingest", "extract", "reflect"):
        lines.append(
            f"| {name} | {mid[name]['seconds']} | {mid[name]['exit_code']} "
            f"| {idle[name]['seconds']} |"
        )
    q = mid["query"]
    lines += [
        f"| query ({q['in_flight']} searches in flight) | {q['seconds']} | {q['exit_code']} | — |",
        "",
        f"Query: {q['answered_200']} of the {q['in_flight']} searches in flight were answered "
        f"200. Afterwards {doc['episodes']:,} episodes for {doc['turns']:,} turns, "
        f"{doc['duplicates']} duplicated.",
    ]
    return "\n".join(lines)


def _cli(args: argparse.Namespace) -> int:
    argv = ["python", "-m", "benchmarks", "shutdown", "--turns", str(args.turns)]
    if args.write_docs:
        argv.append("--write-docs")
    args.command = shlex.join(argv)
    with servers(None, None, need_kafka=True) as (url, boot):
        doc = asyncio.run(_run(args, url, boot))
    docs = Path(args.docs) if args.write_docs else None
    publish(doc, Path(args.json), docs_section(doc), docs, (DOCS_BEGIN, DOCS_END))
    return 0


def register(sub: SubParsers) -> None:
    """Add the ``shutdown`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "shutdown",
        help="seconds from SIGTERM to exit for each service, mid-stream and idle",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--turns", type=int, default=2000, help="turns sent while the SIGTERMs come")
    p.add_argument("--every", type=float, default=3.0, help="seconds between the SIGTERMs")
    p.add_argument(
        "--searches", type=int, default=4, help="searches in flight at the query's SIGTERM"
    )
    p.add_argument("--json", default="bench-results/shutdown.json", metavar="PATH")
    p.add_argument("--docs", default="docs/performance.md", help="with --write-docs")
    p.add_argument("--write-docs", action="store_true", help="update docs/performance.md")
    p.set_defaults(func=_cli)
