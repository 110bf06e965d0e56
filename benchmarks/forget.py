"""``python -m benchmarks forget``: time from DELETE to done, through the running pipeline.

Starts the embedded stack (unless ``--redis-url``/``--kafka-bootstrap`` name running servers)
and the four services as subprocesses (offline extractor), loads one conversation of
``--turns`` turns and a subject spanning ``--subject-conversations`` conversations of
``--subject-turns`` turns each through the broker, waits until every turn is extracted and
reflected, then forgets the conversation and the subject over HTTP and reports, for each, the
seconds from the DELETE to ``done``, the nodes removed and the tenant's Redis keys before and
after. Keys, index and topics carry a run prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from benchmarks.query import machine_info, servers, write_section
from benchmarks.synthetic import speakers, turn_texts
from gaama.config import ApiKey, hash_api_key, load_settings
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, encode, topic_name
from gaama.launch import ServiceProcess
from gaama.store import connect
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys

if TYPE_CHECKING:
    from benchmarks import SubParsers

DOCS_BEGIN, DOCS_END = "<!-- forget:begin -->", "<!-- forget:end -->"
TENANT = "bench-forget"
KEY = "bench-forget-key"


@dataclass
class Options:
    turns: int
    subject_conversations: int
    subject_turns: int
    json_path: Path | None
    docs: Path | None
    command: str
    redis_url: str | None = None
    kafka_bootstrap: str | None = None


def _turns(conv: str, n: int, subject: str, number: int, base: float) -> list[TurnReceived]:
    texts = turn_texts(n, seed=number + 3)
    a, b = speakers(number)
    return [
        TurnReceived(
            tenant=TENANT,
            conversation=conv,
            turn_id=f"T:{i + 1}",
            speaker=(a, b)[i % 2],
            text=text,
            timestamp=datetime.fromtimestamp(base + 60.0 * i, tz=UTC),
            subject=subject,
            end_of_session=(i + 1) % 20 == 0 or i == n - 1,
        )
        for i, text in enumerate(texts)
    ]


async def _produce(bootstrap: str, topic: str, turns: list[TurnReceived]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for t in turns:
            await producer.send(topic, encode(t), key=conversation_key(t.tenant, t.conversation))
        await producer.flush()
    finally:
        await producer.stop()


async def _settled(graph: GraphStore, convs: dict[str, int], within_s: float) -> None:
    """Every turn stored and extracted, then reflection quiet for a few seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        done = True
        for conv, n in convs.items():
            chain = await graph.chain(TENANT, conv)
            nodes = await graph.get_fields(TENANT, chain, ["chunk"])
            done &= len(chain) == n and all(v[0] for v in nodes.values())
        if done:
            await asyncio.sleep(5.0)  # let reflect finish the last chunks
            return
        await asyncio.sleep(1.0)
    raise TimeoutError("the pipeline did not settle in time")


async def _keys(graph: GraphStore) -> int:
    n = 0
    for pattern in graph.keys.tenant_patterns(TENANT):
        async for _ in graph.redis.scan_iter(match=pattern, count=1000):
            n += 1
    return n


async def _forget(c: httpx.AsyncClient, path: str, graph: GraphStore) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {KEY}"}
    before = await _keys(graph)
    started = time.perf_counter()
    r = await c.delete(path, headers=headers)
    r.raise_for_status()
    rid = r.json()["request_id"]
    accepted = time.perf_counter() - started
    while True:
        body = (await c.get(f"/v1/forget/{rid}", headers=headers)).json()
        if body["status"] == "done":
            break
        await asyncio.sleep(0.05)
    return {
        "accept_ms": round(accepted * 1000, 1),
        "done_s": round(time.perf_counter() - started, 3),
        "removed": body["removed"],
        "keys_before": before,
        "keys_after": await _keys(graph),
    }


async def _run(opts: Options, redis_url: str, bootstrap: str) -> dict[str, Any]:
    from gaama.devstack import create_topics

    prefix = f"gbench{uuid.uuid4().hex[:6]}"
    settings = load_settings(
        redis_url=redis_url,
        kafka_bootstrap=bootstrap,
        key_prefix=prefix,
        index_name=f"{prefix}-idx",
        topic_prefix=f"{prefix}.",
        api_keys=[ApiKey(key_sha256=hash_api_key(KEY), tenant=TENANT)],
    )
    await create_topics(bootstrap, settings.topic_partitions, settings.topic_prefix)
    client = connect(redis_url, cluster=settings.redis_cluster, socket_timeout=30)
    graph = GraphStore(client, Keys(prefix))
    log_dir = Path(tempfile.mkdtemp(prefix="gaama-bench-forget-"))
    procs = [ServiceProcess(n, settings, log_dir) for n in ("ingest", "extract", "reflect")]
    query = ServiceProcess("query", settings, log_dir)
    base = datetime(2024, 3, 1, tzinfo=UTC).timestamp()
    turns = _turns("long", opts.turns, "", 0, base)
    convs = {"long": opts.turns}
    for i in range(opts.subject_conversations):
        turns += _turns(f"s{i}", opts.subject_turns, "user-42", i + 1, base)
        convs[f"s{i}"] = opts.subject_turns
    try:
        for p in [*procs, query]:
            await p.astart(180)
        loaded = time.perf_counter()
        await _produce(bootstrap, topic_name(TOPIC_TURNS, settings.topic_prefix), turns)
        await _settled(graph, convs, within_s=3600)
        load_s = time.perf_counter() - loaded
        async with httpx.AsyncClient(base_url=query.url, timeout=60) as c:
            conversation = await _forget(c, "/v1/conversations/long", graph)
            subject = await _forget(c, "/v1/subjects/user-42", graph)
    finally:
        for p in [*procs, query]:
            p.stop()
        await graph.delete_tenant(TENANT)
        await client.aclose()
    return {
        "conversation": {"turns": opts.turns, **conversation},
        "subject": {
            "conversations": opts.subject_conversations,
            "turns": opts.subject_conversations * opts.subject_turns,
            **subject,
        },
        "load_seconds": round(load_s, 1),
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
    }


def docs_section(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    rows = []
    for name in ("conversation", "subject"):
        r = doc[name]
        what = (
            f"a conversation of {r['turns']:,} turns"
            if name == "conversation"
            else f"a subject in {r['conversations']} conversations ({r['turns']:,} turns)"
        )
        removed = ", ".join(f"{k} {v:,}" for k, v in sorted(r["removed"].items()))
        rows.append(
            f"| {what} | {r['accept_ms']:.0f} | {r['done_s']:.2f} | {removed} | "
            f"{r['keys_before']:,} → {r['keys_after']:,} |"
        )
    return "\n".join(
        [
            "## Forgetting",
            "",
            f"Run on {doc['date']} with `{doc['command']}` ({m['cpus']} CPUs, {m['cpu']}): the "
            "four services on the embedded stack (offline extractor), the data loaded through "
            f"the broker and settled ({doc['load_seconds']:.0f} s), then each scope forgotten "
            "over HTTP; timed from the DELETE to `done` (every lane through ingest, extract and "
            "reflect, then the cascade), keys counted over the tenant's whole keyspace.",
            "",
            "| forgotten | DELETE answered, ms | done after, s | removed | tenant's keys |",
            "|---|---:|---:|---|---|",
            *rows,
        ]
    )


def main(opts: Options) -> dict[str, Any]:
    with servers(opts.redis_url, opts.kafka_bootstrap, need_kafka=True) as (url, boot):
        doc = asyncio.run(_run(opts, url, boot))
    if opts.json_path:
        opts.json_path.parent.mkdir(parents=True, exist_ok=True)
        opts.json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if opts.docs:
        write_section(opts.docs, DOCS_BEGIN, DOCS_END, docs_section(doc))
    return doc


def _cli(args: argparse.Namespace) -> int:
    argv = ["python", "-m", "benchmarks", "forget", "--turns", str(args.turns)]
    argv += ["--subject-conversations", str(args.subject_conversations)]
    argv += ["--subject-turns", str(args.subject_turns)]
    if args.write_docs:
        argv.append("--write-docs")
    main(
        Options(
            turns=args.turns,
            subject_conversations=args.subject_conversations,
            subject_turns=args.subject_turns,
            json_path=Path(args.json) if args.json else None,
            docs=Path(args.docs) if args.write_docs else None,
            command=shlex.join(argv),
            redis_url=args.redis_url,
            kafka_bootstrap=args.kafka_bootstrap,
        )
    )
    return 0


def register(sub: SubParsers) -> None:
    """Add the ``forget`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "forget",
        help="time from DELETE to done for a conversation and a subject",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--turns", type=int, default=1000, help="turns of the forgotten conversation")
    p.add_argument("--subject-conversations", type=int, default=10)
    p.add_argument("--subject-turns", type=int, default=50, help="turns per subject conversation")
    p.add_argument("--redis-url", default=None, help="with --kafka-bootstrap: use these servers")
    p.add_argument("--kafka-bootstrap", default=None)
    p.add_argument("--json", default="bench-results/forget.json", metavar="PATH")
    p.add_argument("--docs", default="docs/performance.md", help="with --write-docs")
    p.add_argument("--write-docs", action="store_true", help="update docs/performance.md")
    p.set_defaults(func=_cli)
