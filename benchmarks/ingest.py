"""``python -m benchmarks ingest``: end-to-end ingest throughput through the broker.

Starts the embedded stack (unless ``--redis-url``/``--kafka-bootstrap`` or ``GAAMA_REDIS_URL`` and
``GAAMA_KAFKA_BOOTSTRAP`` name running servers) and the ingest service as a subprocess, produces
``--turns`` turns over several tenants and conversations to the turns topic with aiokafka, and
waits until every episode is in Redis (the NEXT-chain lengths). Reports turns/s end to end (first
send to last episode stored), the share of that wall time the service spent embedding (from its
``/metrics``: ``gaama_ingest_embedding_seconds`` sum) and the batch latency p50 (from the
``gaama_ingest_batch_seconds`` histogram). The ceiling is MiniLM's batch encode rate
(ARCHITECTURE.md §4: ~120 texts/s on two cores). Keys, index and topics carry a run prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from redis.exceptions import RedisError
from tqdm import tqdm

from benchmarks import backends
from benchmarks.query import machine_info, servers, write_section
from benchmarks.synthetic import speakers, turn_texts
from gaama.config import Settings, load_settings
from gaama.episodes import episode_node
from gaama.errors import ConfigError
from gaama.events import (
    TOPIC_TURNS,
    TurnReceived,
    conversation_key,
    encode,
    parse_time,
    topic_name,
)
from gaama.launch import ServiceProcess
from gaama.store import connect
from gaama.store.bulk import BulkLoader
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex

if TYPE_CHECKING:
    from benchmarks import SubParsers

DOCS_BEGIN, DOCS_END = "<!-- ingest:begin -->", "<!-- ingest:end -->"
CEILING_TEXTS_PER_S = 120.0  # ARCHITECTURE.md §4, MiniLM batch encode (batch 64), 2 cores
STALL_TIMEOUT_S = 120.0  # no new episode for this long: the service is stuck, give up
WARMUP_TURNS = 32
DEFAULT_BACKENDS = "onnx,torch"


@dataclass(slots=True)
class Options:
    turns: int = 8000
    tenants: int = 4
    conversations: int = 5  # per tenant
    redis_url: str | None = None
    kafka_bootstrap: str | None = None
    json_path: Path | None = Path("bench-results/ingest.json")
    docs: Path | None = None
    progress: bool = True
    command: str = ""
    # Embedding backends, one ingest service run each; the first gives the top-level figures.
    backends: tuple[str, ...] = (backends.DEFAULT, "torch")
    rounds: int = 2  # runs per backend, in the order A B … B A


@dataclass(frozen=True, slots=True)
class Conv:
    tenant: str
    name: str
    number: int


def _turns(convs: list[Conv], n: int, base: float) -> list[TurnReceived]:
    """``n`` turns dealt round-robin over ``convs``, in order within each conversation."""
    texts = turn_texts(n)
    out = []
    for i, text in enumerate(texts):
        c = convs[i % len(convs)]
        k = i // len(convs)
        out.append(
            TurnReceived(
                tenant=c.tenant,
                conversation=c.name,
                turn_id=f"D1:{k + 1}",
                speaker=speakers(c.number)[k % 2],
                text=text,
                timestamp=parse_time(base + 60.0 * k),
            )
        )
    return out


async def produce(bootstrap: str, topic: str, turns: list[TurnReceived]) -> float:
    """Send every turn (acks=all); seconds until the broker has them all."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, request_timeout_ms=30000
    )
    await producer.start()
    started = time.perf_counter()
    try:
        futures = [
            await producer.send(
                topic, value=encode(t), key=conversation_key(t.tenant, t.conversation)
            )
            for t in turns
        ]
        await producer.flush()
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return time.perf_counter() - started


async def stored(bulk: BulkLoader, convs: list[Conv]) -> int:
    """Episodes in Redis over ``convs`` (sum of NEXT-chain lengths, one round trip)."""
    return sum(await bulk.chain_lengths([(c.tenant, c.name) for c in convs]))


async def wait_stored(
    bulk: BulkLoader, convs: list[Conv], expect: int, progress: bool, desc: str
) -> None:
    bar = tqdm(total=expect, desc=desc, unit="turn", disable=not progress)
    last, last_change = 0, time.monotonic()
    try:
        while True:
            n = await stored(bulk, convs)
            bar.update(n - last)
            if n != last:
                last, last_change = n, time.monotonic()
            if n >= expect:
                return
            if time.monotonic() - last_change > STALL_TIMEOUT_S:
                raise ConfigError(
                    f"ingest stalled at {n}/{expect} episodes for {STALL_TIMEOUT_S:.0f} s"
                )
            await asyncio.sleep(0.05)
    finally:
        bar.close()


async def scrape(url: str) -> dict[str, Any]:
    """The ingest service's counters and histograms of interest, from ``/metrics``."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{url}/metrics")).text
    out: dict[str, Any] = {"batch_buckets": {}}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "gaama_ingest_embedding_seconds_sum":
                out["embed_s"] = s.value
            elif s.name == "gaama_ingest_embedded_texts_total":
                out["embedded"] = s.value
            elif s.name == "gaama_ingest_batch_seconds_sum":
                out["batch_s"] = s.value
            elif s.name == "gaama_ingest_batch_seconds_count":
                out["batches"] = s.value
            elif s.name == "gaama_ingest_batch_seconds_bucket":
                out["batch_buckets"][float(s.labels["le"])] = s.value
            elif s.name == "gaama_ingest_stored_total" and s.labels.get("kind") == "episode":
                out["finished"] = s.value
    return out


async def wait_finished(url: str, expect: int) -> dict[str, Any]:
    """The service's figures once ``expect`` episodes have finished: written, fsynced and their
    events published (a batch is counted when its acknowledgement is due, which may come a
    moment after its episodes can be read, since the fsync wait runs behind the next batch)."""
    last, last_change = -1.0, time.monotonic()
    while True:
        now = await scrape(url)
        n = now.get("finished", 0.0)
        if n >= expect:
            return now
        if n != last:
            last, last_change = n, time.monotonic()
        if time.monotonic() - last_change > STALL_TIMEOUT_S:
            raise ConfigError(f"ingest finished {n:.0f}/{expect} episodes and stalled")
        await asyncio.sleep(0.05)


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """Quantile of the observations between two scrapes of a cumulative histogram, linearly
    interpolated within the bucket (as Prometheus' ``histogram_quantile`` does)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return 0.0
    rank, lower, below = q * total, 0.0, 0.0
    for bound, cum in zip(bounds, counts, strict=True):
        if cum >= rank:
            if bound == float("inf"):
                return lower
            inside = cum - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = bound, cum
    return lower


def run_settings(prefix: str, redis_url: str, bootstrap: str) -> Settings:
    """Settings whose keys, index and topics all carry ``prefix`` (one run's namespace)."""
    return load_settings(
        redis_url=redis_url,
        kafka_bootstrap=bootstrap,
        key_prefix=prefix,
        index_name=f"{prefix}-idx",
        topic_prefix=f"{prefix}.",
    )


_EMBEDDERS: dict[str, Any] = {}


def embed_only(backend: str, texts: list[str], batch: int) -> float:
    """Seconds ``backend`` takes to embed ``texts`` on its own, in this process, in calls of
    ``batch`` texts as the ingest handler makes them (the service is stopped meanwhile)."""
    from gaama.embed import build_embedder

    e: Any = _EMBEDDERS.get(backend)  # a local backend: warm_up and embed_sync
    if e is None:
        e = _EMBEDDERS[backend] = build_embedder(load_settings(**backends.settings(backend)))
        e.warm_up()
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        e.embed_sync(texts[i : i + batch])
    return time.perf_counter() - started


async def _run(opts: Options, redis_url: str, bootstrap: str, backend: str) -> dict[str, Any]:

    from gaama.devstack import create_topics

    prefix = f"gbench{uuid.uuid4().hex[:6]}"
    settings = run_settings(prefix, redis_url, bootstrap)
    await create_topics(bootstrap, settings.topic_partitions, settings.topic_prefix)
    topic = topic_name(TOPIC_TURNS, settings.topic_prefix)
    keys = Keys(prefix)
    client = connect(redis_url, cluster=settings.redis_cluster, socket_timeout=30)
    graph = GraphStore(client, keys)
    bulk = BulkLoader(graph)
    log_dir = Path(tempfile.mkdtemp(prefix="gaama-bench-ingest-"))
    service = ServiceProcess("ingest", settings, log_dir, extra=backends.env(backend))
    warm = [Conv("bench-warm", "warm", 0)]
    convs = [
        Conv(f"bench-t{t}", f"conv-{c}", t * opts.conversations + c)
        for t in range(opts.tenants)
        for c in range(opts.conversations)
    ]
    base = datetime(2024, 3, 1, tzinfo=UTC).timestamp()
    try:
        await service.astart(180)
        # Warm-up: the consumer group is assigned and the model has run once before timing.
        await produce(settings.kafka_bootstrap_servers, topic, _turns(warm, WARMUP_TURNS, base))
        await wait_stored(bulk, warm, WARMUP_TURNS, False, "warm-up")
        turns = _turns(convs, opts.turns, base)
        before = await wait_finished(service.url, WARMUP_TURNS)
        started = time.perf_counter()
        produce_task = asyncio.create_task(produce(settings.kafka_bootstrap_servers, topic, turns))
        await wait_stored(bulk, convs, opts.turns, opts.progress, f"ingest {opts.turns:,} turns")
        after = await wait_finished(service.url, WARMUP_TURNS + opts.turns)
        wall = time.perf_counter() - started
        produce_s = await produce_task
        in_order = True
        for c in convs:  # each chain must hold its turns in the order they were sent
            want = [t.turn_id for t in turns if (t.tenant, t.conversation) == (c.tenant, c.name)]
            got = await graph.chain(c.tenant, c.name)
            fields = await graph.get_fields(c.tenant, got, ["turn_id"])
            in_order &= [(fields[g][0] or b"").decode() for g in got] == want
    finally:
        service.stop()
        for tenant in {c.tenant for c in [*warm, *convs]}:
            await graph.delete_tenant(tenant)
        with contextlib.suppress(RedisError):  # best-effort clean-up
            await VectorIndex(client, settings.index_name, settings.embed_dim, keys).drop()
        await client.aclose()
    # The same texts through the same backend alone, right after the run (same load).
    alone_s = embed_only(backend, [episode_node(t).text for t in turns], settings.ingest_batch)
    embed_s = after.get("embed_s", 0.0) - before.get("embed_s", 0.0)
    embedded = after.get("embedded", 0.0) - before.get("embedded", 0.0)
    batches = after.get("batches", 0.0) - before.get("batches", 0.0)
    batch_p50 = histogram_quantile(0.5, before["batch_buckets"], after["batch_buckets"])
    return {
        "backend": backend,
        "turns": opts.turns,
        "tenants": opts.tenants,
        "conversations": len(convs),
        "partitions": settings.topic_partitions,
        "seconds": round(wall, 3),
        "turns_per_s": round(opts.turns / wall, 1),
        "produce_seconds": round(produce_s, 3),
        "embedding_seconds": round(embed_s, 3),
        "embedding_share": round(embed_s / wall, 3) if wall else 0.0,
        "embedded_texts": int(embedded),
        "embed_texts_per_s": round(embedded / embed_s, 1) if embed_s else 0.0,
        "embed_only_seconds": round(alone_s, 3),
        "embed_only_texts_per_s": round(opts.turns / alone_s, 1),
        "share_of_embed_only": round(wall and alone_s / wall, 2),
        "batches": int(batches),
        "mean_batch_turns": round(opts.turns / batches, 1) if batches else 0.0,
        "batch_p50_ms": round(batch_p50 * 1000.0, 1),
        "batch_mean_ms": round(
            (after.get("batch_s", 0.0) - before.get("batch_s", 0.0)) / batches * 1000.0, 1
        )
        if batches
        else 0.0,
        "chains_in_order": in_order,
        "ceiling_texts_per_s": CEILING_TEXTS_PER_S,
        "share_of_ceiling": round(opts.turns / wall / CEILING_TEXTS_PER_S, 2),
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
    }


def _backend_rows(doc: dict[str, Any]) -> list[str]:
    """The same run with each embedding backend (same turns, a fresh service and namespace)."""
    runs = doc.get("backends") or {}
    if len(runs) < 2:
        return []
    first = runs[doc["backend"]]
    rows = [
        f"Each embedding backend ran the same turns through its own ingest service, "
        f"{doc.get('rounds', 1)} time(s), the backends in the order A B … B A so that drift "
        f"of the machine falls on all (the table above is `{doc['backend']}`, totals of its "
        "runs):",
        "",
        f"| embedder | turns/s (each run) | embed texts/s | embed-only texts/s | ingest ÷ "
        f"embed-only | {doc['backend']} turns/s ÷ this |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in runs.items():
        ratio = first["turns_per_s"] / r["turns_per_s"] if r["turns_per_s"] else 0.0
        each = ", ".join(f"{x:.1f}" for x in r.get("rounds_turns_per_s", []))
        rows.append(
            f"| {name} | {r['turns_per_s']:.1f} ({each}) | {r['embed_texts_per_s']:.0f} | "
            f"{r.get('embed_only_texts_per_s', 0.0):.0f} | "
            f"{r.get('share_of_embed_only', 0.0):.2f} | {ratio:.2f}× |"
        )
    return [*rows, ""]


def docs_section(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    return "\n".join(
        [
            "## Ingest throughput (through the broker)",
            "",
            f"Run on {doc['date']} with `{doc['command']}` ({m['cpus']} CPUs, {m['cpu']}): "
            f"{doc['turns']:,} turns over {doc['tenants']} tenants / {doc['conversations']} "
            f"conversations produced with aiokafka to the turns topic ({doc['partitions']} "
            "partitions), consumed by one ingest service process (embedding with MiniLM on the "
            f"`{doc.get('backend', 'torch')}` backend, atomic "
            "episode + NEXT write); timed from the first send until every episode is in Redis.",
            "",
            "| turns | wall s | turns/s | embedding share | embed texts/s | embed-only texts/s | "
            "batches | turns/batch | batch p50 ms | batch mean ms | chains in order |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            f"| {doc['turns']:,} | {doc['seconds']:.1f} | {doc['turns_per_s']:.1f} | "
            f"{doc['embedding_share']:.0%} | {doc['embed_texts_per_s']:.0f} | "
            f"{doc.get('embed_only_texts_per_s', 0.0):.0f} | {doc['batches']} | "
            f"{doc['mean_batch_turns']:.1f} | {doc['batch_p50_ms']:.0f} | "
            f"{doc['batch_mean_ms']:.0f} | "
            f"{'yes' if doc['chains_in_order'] else '**no**'} |",
            "",
            *_backend_rows(doc),
            "Embed-only: the same turn texts through the same backend in the benchmark's "
            "process right after each run, the service stopped, in calls of "
            "`GAAMA_INGEST_BATCH` texts as the handler makes them; ingest ran at "
            f"{doc.get('share_of_embed_only', 0.0):.2f} of that rate. "
            "Embedding is the bound: ARCHITECTURE.md §4 lists MiniLM batch encoding at "
            f"≈ {doc['ceiling_texts_per_s']:.0f} texts/s on a machine of this kind; end to end "
            f"this run ingested {doc['share_of_ceiling']:.0%} of that rate (the machine's load "
            "varies between runs). "
            "Batch p50 is interpolated from the service's `gaama_ingest_batch_seconds` histogram "
            "buckets.",
            *(["", *doc["notes"]] if doc.get("notes") else []),
        ]
    )


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One backend's rounds as one run: totals, and rates of the totals."""
    out = dict(runs[-1])
    if len(runs) == 1:
        return out
    for k in ("turns", "seconds", "produce_seconds", "embedding_seconds", "embed_only_seconds"):
        out[k] = round(sum(r[k] for r in runs), 3)
    out["embed_only_texts_per_s"] = round(out["turns"] / out["embed_only_seconds"], 1)
    out["share_of_embed_only"] = round(out["embed_only_seconds"] / out["seconds"], 2)
    for k in ("embedded_texts", "batches"):
        out[k] = sum(r[k] for r in runs)
    out["turns_per_s"] = round(out["turns"] / out["seconds"], 1)
    out["embedding_share"] = round(out["embedding_seconds"] / out["seconds"], 3)
    emb = out["embedding_seconds"]
    out["embed_texts_per_s"] = round(out["embedded_texts"] / emb, 1) if emb else 0.0
    if out["batches"]:
        out["mean_batch_turns"] = round(out["turns"] / out["batches"], 1)
        weighted = sum(r["batch_mean_ms"] * r["batches"] for r in runs)
        out["batch_mean_ms"] = round(weighted / out["batches"], 1)
    out["batch_p50_ms"] = round(float(np.median([r["batch_p50_ms"] for r in runs])), 1)
    out["chains_in_order"] = all(r["chains_in_order"] for r in runs)
    out["share_of_ceiling"] = round(out["turns_per_s"] / CEILING_TEXTS_PER_S, 2)
    out["rounds"] = len(runs)
    return out


def main(opts: Options) -> dict[str, Any]:
    url = opts.redis_url or os.environ.get("GAAMA_REDIS_URL")
    boot = opts.kafka_bootstrap or os.environ.get("GAAMA_KAFKA_BOOTSTRAP")
    if not (url and boot):  # both or neither: the service needs the pair that belongs together
        url = boot = None
    done: dict[str, list[dict[str, Any]]] = {b: [] for b in opts.backends}
    with servers(url, boot, need_kafka=True) as (redis_url, bootstrap):
        # A B … B A: drift of a shared machine falls on every backend alike.
        for r in range(opts.rounds):
            for b in opts.backends if r % 2 == 0 else reversed(opts.backends):
                done[b].append(asyncio.run(_run(opts, redis_url, bootstrap, b)))
    runs = {b: combine(rs) for b, rs in done.items()}
    doc = dict(runs[opts.backends[0]])
    doc["backends"] = {
        b: {
            "turns_per_s": r["turns_per_s"],
            "embed_texts_per_s": r["embed_texts_per_s"],
            "embed_only_texts_per_s": r["embed_only_texts_per_s"],
            "share_of_embed_only": r["share_of_embed_only"],
            "rounds_turns_per_s": [x["turns_per_s"] for x in done[b]],
        }
        for b, r in runs.items()
    }
    if opts.json_path:
        opts.json_path.parent.mkdir(parents=True, exist_ok=True)
        if opts.json_path.exists():  # keep hand-written notes across runs
            with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
                notes = json.loads(opts.json_path.read_text(encoding="utf-8")).get("notes")
                if notes:
                    doc["notes"] = notes
        opts.json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if opts.docs:
        write_section(opts.docs, DOCS_BEGIN, DOCS_END, docs_section(doc))
    return doc


def command_line(args: argparse.Namespace) -> str:
    argv = ["python", "-m", "benchmarks", "ingest", "--turns", str(args.turns)]
    if args.tenants != 4 or args.conversations != 5:
        argv += ["--tenants", str(args.tenants), "--conversations", str(args.conversations)]
    if args.backends != DEFAULT_BACKENDS:
        argv += ["--backends", args.backends]
    if args.rounds != 2:
        argv += ["--rounds", str(args.rounds)]
    if args.write_docs:
        argv.append("--write-docs")
    return shlex.join(argv)


def _cli(args: argparse.Namespace) -> int:
    if min(args.turns, args.tenants, args.conversations, args.rounds) < 1:
        print(
            "python -m benchmarks ingest: --turns, --tenants, --conversations and --rounds must "
            "be ≥ 1",
            file=sys.stderr,
        )
        return 2
    try:
        names = backends.parse(args.backends)
    except ConfigError as exc:
        print(f"python -m benchmarks ingest: {exc}", file=sys.stderr)
        return 2
    opts = Options(
        backends=names,
        rounds=args.rounds,
        turns=args.turns,
        tenants=args.tenants,
        conversations=args.conversations,
        redis_url=args.redis_url,
        kafka_bootstrap=args.kafka_bootstrap,
        json_path=Path(args.json) if args.json else None,
        docs=Path(args.docs) if args.write_docs else None,
        progress=not args.no_progress,
        command=command_line(args),
    )
    try:
        main(opts)
    except ConfigError as exc:
        print(f"python -m benchmarks ingest: {exc}", file=sys.stderr)
        return 2
    return 0


def register(sub: SubParsers) -> None:
    """Add the ``ingest`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "ingest",
        help="end-to-end ingest throughput through the broker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--turns",
        type=int,
        default=8000,
        help="turns to produce (default 8000: a run of about half a minute here, so that the "
        "first batch's wait and the last batch's fsync wait, about a second each, are not "
        "counted as a sizeable share of the throughput)",
    )
    p.add_argument("--tenants", type=int, default=4)
    p.add_argument("--conversations", type=int, default=5, help="conversations per tenant")
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="runs of --turns per backend, backends in the order A B … B A (default 2); the "
        "figures are the totals of a backend's runs",
    )
    p.add_argument(
        "--backends",
        default=DEFAULT_BACKENDS,
        help=f"embedding backends, one service run each (default {DEFAULT_BACKENDS}; the first "
        "gives the top-level figures)",
    )
    p.add_argument("--redis-url", default=None, help="with --kafka-bootstrap: use these servers")
    p.add_argument("--kafka-bootstrap", default=None)
    p.add_argument("--json", default="bench-results/ingest.json", metavar="PATH")
    p.add_argument(
        "--write-docs", action="store_true", help="update the ingest section of docs/performance.md"
    )
    p.add_argument("--docs", default="docs/performance.md", help=argparse.SUPPRESS)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cli)
