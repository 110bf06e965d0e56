"""``python -m benchmarks pipeline --saturate``: the pipeline's throughput at saturation.

The embedded stack (unless ``--redis-url``/``--kafka-bootstrap`` name running servers) and the
services ingest, extract and reflect as processes (the offline extractor), each tenant empty.
For 1 and then 2 extract processes (one consumer group), three phases on a tenant each:

- **saturation**: ``--turns`` turns produced as fast as the pipeline takes them (a producer that
  keeps at most ``IN_FLIGHT`` turns sent but not yet extracted), until every one is extracted
  and reflected (no open chunk, the outbox empty). ``turns_per_s`` is the turns over that time;
  ``cpu_s_per_1k`` the CPU seconds (user + system, ``/proc/<pid>/stat``) each stage's processes
  spent over it per 1,000 turns; ``turns_per_cpu_s`` the turns over ingest + extract + reflect's
  CPU seconds; ``embedding_share`` the part of each stage's CPU spent off the main thread (the
  event loop runs there, the MiniLM calls on worker threads; ``embedding_wall_s_per_1k`` is
  their ``gaama_<svc>_embedding_seconds``, wall time that includes waiting for a core);
  ``redis_bytes_per_turn`` the growth of Redis' ``used_memory`` over the turns.
- **50 %** and **80 %**: ``--seconds`` of turns at that share of the saturation rate, then the
  drain; freshness from sending a turn until its episode is stored, and until its chunk's facts
  are stored (the episode's extracted mark, written in the MULTI/EXEC that writes the facts and
  so their index entries), p50 / p99, polled every ``--poll-s``.

The figures of one run are what :func:`docs_section` turns into the docs' table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from redis.exceptions import RedisError

from benchmarks.pipeline import STAGES, cpu_seconds, live_turns
from benchmarks.query import machine_info, percentile, servers, write_section
from gaama import ids
from gaama.config import Settings, load_settings
from gaama.errors import ConfigError
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, encode, topic_name
from gaama.launch import ServiceProcess
from gaama.store import connect
from gaama.store.chunks import ChunkStore
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.outbox import Outbox
from gaama.store.vectors import VectorIndex

DOCS_BEGIN, DOCS_END = "<!-- pipeline-saturate:begin -->", "<!-- pipeline-saturate:end -->"
#: The saturation targets: turns per CPU-second of ingest + extract + reflect together, and the
#: fact freshness p99 at 80 % of the saturation rate.
MIN_TURNS_PER_CPU_S = 60.0
MAX_FACT_FRESH_P99_S = 10.0
SHARES = (0.5, 0.8)
REPLICAS = (1, 2)
IN_FLIGHT = 2000  # turns sent but not yet extracted that the saturating producer allows
CONVERSATIONS = 64
STALL_TIMEOUT_S = 120.0  # nothing new for this long: the pipeline is stuck, give up
PROGRESS_EVERY_S = 5.0
DEFAULT_TURNS = 3000
DEFAULT_POLL_S = 0.25


@dataclass(slots=True)
class Options:
    turns: int = DEFAULT_TURNS  # turns of each saturation phase
    seconds: float = 30.0  # produce time of each 50 % / 80 % phase
    replicas: tuple[int, ...] = REPLICAS
    session_turns: int = 5
    chunk_idle_s: float = 2.0
    poll_s: float = DEFAULT_POLL_S
    redis_url: str | None = None
    kafka_bootstrap: str | None = None
    json_path: Path | None = Path("bench-results/pipeline-saturate.json")
    docs: Path | None = None
    progress: bool = True
    command: str = ""


def log(opts: Options, line: str) -> None:
    if opts.progress:
        print(line, file=sys.stderr, flush=True)


# --- what the stores say --------------------------------------------------------------------


@dataclass
class Tracker:
    """When each sent turn's episode, and its extracted mark, were first seen in the store."""

    graph: GraphStore
    tenant: str
    sent_at: dict[str, float]
    stored_at: dict[str, float]
    extracted_at: dict[str, float]
    room: asyncio.Event  # set by each poll: the producer may look at in_flight() again

    @classmethod
    def of(cls, graph: GraphStore, tenant: str) -> Tracker:
        return cls(graph, tenant, {}, {}, {}, asyncio.Event())

    def in_flight(self) -> int:
        return len(self.sent_at) - len(self.extracted_at)

    async def poll(self) -> None:
        self.room.set()
        waiting = [e for e in self.sent_at if e not in self.extracted_at]
        if not waiting:
            return
        rows = await self.graph.get_fields(self.tenant, waiting, ["kind", "chunk"])
        now = time.perf_counter()
        for eid, (kind, chunk) in rows.items():
            if kind is not None:
                self.stored_at.setdefault(eid, now)
            if chunk is not None:
                self.stored_at.setdefault(eid, now)
                self.extracted_at[eid] = now

    def figures(self) -> dict[str, Any]:
        ep = [self.stored_at[e] - s for e, s in self.sent_at.items() if e in self.stored_at]
        fa = [self.extracted_at[e] - s for e, s in self.sent_at.items() if e in self.extracted_at]
        return {
            "episode_fresh_p50_s": round(percentile(ep, 50), 3),
            "episode_fresh_p99_s": round(percentile(ep, 99), 3),
            "fact_fresh_p50_s": round(percentile(fa, 50), 3),
            "fact_fresh_p99_s": round(percentile(fa, 99), 3),
        }


@dataclass
class Stack:
    settings: Settings
    redis: Any
    graph: GraphStore
    chunks: ChunkStore
    outbox: Outbox
    procs: dict[str, list[ServiceProcess]]  # stage -> its processes


async def drained(stack: Stack, tenant: str) -> bool:
    """No open chunk and nothing left to reflect for ``tenant``."""
    if await stack.chunks.open_conversations(tenant):
        return False
    return not await stack.outbox.pending(tenant)


def stage_cpu(stack: Stack) -> dict[str, tuple[float, float]]:
    """Per stage, its processes' CPU seconds so far: (all threads, the main thread only)."""
    out: dict[str, tuple[float, float]] = {}
    for s, ps in stack.procs.items():
        pids = [p.proc.pid for p in ps if p.proc is not None]
        out[s] = (
            sum(cpu_seconds(pid) for pid in pids),
            sum(cpu_seconds(pid, thread=pid) for pid in pids),
        )
    return out


async def embedding_seconds(client: httpx.AsyncClient, stack: Stack) -> dict[str, float]:
    """Per stage, the summed ``gaama_<svc>_embedding_seconds`` of its processes."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for stage, ps in stack.procs.items():
        total = 0.0
        for p in ps:
            text = (await client.get(f"{p.url}/metrics")).text
            for fam in text_string_to_metric_families(text):
                if fam.name == f"gaama_{stage}_embedding_seconds":
                    total += sum(s.value for s in fam.samples if s.name.endswith("_sum"))
        out[stage] = total
    return out


async def redis_used_memory(redis: Any) -> int:
    return int((await redis.info("memory"))["used_memory"])


# --- one phase ------------------------------------------------------------------------------


async def run_phase(
    opts: Options,
    stack: Stack,
    client: httpx.AsyncClient,
    tenant: str,
    turns: Sequence[TurnReceived],
    rate: float | None,
    label: str,
) -> dict[str, Any]:
    """Produce ``turns`` (at ``rate`` a second, or as fast as the pipeline takes them when
    None) and wait until they are all extracted and reflected; the phase's figures."""
    from aiokafka import AIOKafkaProducer

    topic = topic_name(TOPIC_TURNS, stack.settings.topic_prefix)
    track = Tracker.of(stack.graph, tenant)
    producer = AIOKafkaProducer(
        bootstrap_servers=stack.settings.kafka_bootstrap_servers, acks="all", linger_ms=5
    )
    await producer.start()
    mem_before = await redis_used_memory(stack.redis)
    emb_before = await embedding_seconds(client, stack)
    cpu_before = stage_cpu(stack)
    started = time.perf_counter()

    async def produce() -> None:
        futures = []
        for i, t in enumerate(turns):
            if rate is not None:
                delay = started + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            else:
                while track.in_flight() >= IN_FLIGHT:
                    track.room.clear()
                    await track.room.wait()
            track.sent_at[ids.episode_id(t.tenant, t.conversation, t.turn_id)] = time.perf_counter()
            key = conversation_key(t.tenant, t.conversation)
            futures.append(await producer.send(topic, value=encode(t), key=key))
        await producer.flush()
        await asyncio.gather(*futures)

    producing = asyncio.create_task(produce())
    last_change, last_count, shown = started, -1, started
    try:
        while True:
            await asyncio.sleep(opts.poll_s)
            if producing.done():
                producing.result()  # a failed send ends the run here
            await track.poll()
            done = len(track.extracted_at)
            now = time.perf_counter()
            if done != last_count:
                last_change, last_count = now, done
            if now - shown >= PROGRESS_EVERY_S:
                shown = now
                log(
                    opts,
                    f"  {label}, {now - started:.0f} s: sent {len(track.sent_at)}/{len(turns)}, "
                    f"stored {len(track.stored_at)}, extracted {done}",
                )
            if producing.done() and done == len(turns) and await drained(stack, tenant):
                break
            if now - last_change > STALL_TIMEOUT_S:
                raise ConfigError(f"the pipeline stalled for {STALL_TIMEOUT_S:.0f} s ({label})")
    finally:
        if not producing.done():
            producing.cancel()
        await producer.stop()
    wall = time.perf_counter() - started
    cpu_after = stage_cpu(stack)
    cpu = {s: v[0] - cpu_before[s][0] for s, v in cpu_after.items()}
    # the event loop runs on the main thread; the embedder's calls run on worker threads
    off_main = {s: cpu[s] - (v[1] - cpu_before[s][1]) for s, v in cpu_after.items()}
    emb = {s: v - emb_before[s] for s, v in (await embedding_seconds(client, stack)).items()}
    mem = await redis_used_memory(stack.redis) - mem_before
    own = sum(cpu[s] for s in STAGES)
    n = len(turns)
    return {
        "turns": n,
        "seconds": round(wall, 2),
        "produce_rate": rate,
        "turns_per_s": round(n / wall, 1),
        "cpu_s_per_1k": {s: round(cpu[s] / n * 1000, 2) for s in cpu},
        "turns_per_cpu_s": round(n / own, 1) if own else 0.0,
        "embedding_share": {s: round(off_main[s] / cpu[s], 3) if cpu[s] else 0.0 for s in STAGES},
        "embedding_wall_s_per_1k": {s: round(emb[s] / n * 1000, 2) for s in STAGES},
        "redis_bytes_per_turn": round(mem / n),
    } | track.figures()


# --- the run --------------------------------------------------------------------------------


async def _run(opts: Options, redis_url: str, bootstrap: str) -> dict[str, Any]:
    from gaama.devstack import create_topics

    run_id = uuid.uuid4().hex[:6]
    prefix = f"gsat{run_id}"
    settings = load_settings(
        redis_url=redis_url,
        kafka_bootstrap=bootstrap,
        key_prefix=prefix,
        index_name=f"{prefix}-idx",
        topic_prefix=f"{prefix}.",
        chunk_idle_s=opts.chunk_idle_s,
        api_keys=[],
    )
    await create_topics(bootstrap, settings.topic_partitions, settings.topic_prefix)
    keys = Keys(prefix)
    redis = connect(redis_url, socket_timeout=600)
    graph = GraphStore(redis, keys)
    index = VectorIndex(redis, settings.index_name, settings.embed_dim, keys)
    await index.ensure()
    log_dir = Path(tempfile.mkdtemp(prefix="gaama-bench-saturate-"))
    extra = {"GAAMA_TENANT_CONCURRENCY": "0", "GAAMA_TENANT_RATE": "0"}

    def proc(name: str) -> ServiceProcess:
        return ServiceProcess(name, settings, log_dir, inherit=True, extra=extra)

    procs: dict[str, list[ServiceProcess]] = {s: [proc(s)] for s in STAGES}
    tenants: list[str] = []
    configs: list[dict[str, Any]] = []
    try:
        for ps in procs.values():
            await ps[0].astart(240)
        stack = Stack(settings, redis, graph, ChunkStore(redis, keys), Outbox(redis, keys), procs)
        async with httpx.AsyncClient(timeout=60) as client:
            for replicas in sorted(opts.replicas):
                while len(procs["extract"]) < replicas:
                    extra_proc = proc("extract")
                    await extra_proc.astart(240)
                    procs["extract"].append(extra_proc)

                def phase_turns(
                    name: str, n: int, replicas: int = replicas
                ) -> tuple[str, list[TurnReceived]]:
                    tenant = f"bench-sat-{replicas}x-{name}"
                    tenants.append(tenant)
                    convs = min(CONVERSATIONS, max(1, n // opts.session_turns))
                    return tenant, live_turns(tenant, n, convs, opts.session_turns)

                # warm-up: models loaded, every extract replica assigned its partitions
                log(opts, f"# {replicas} extract: warm-up")
                tenant, warm = phase_turns("warm", min(2 * CONVERSATIONS, opts.turns))
                await run_phase(opts, stack, client, tenant, warm, 50.0, "warm-up")
                log(opts, f"# {replicas} extract: saturation, {opts.turns} turns")
                tenant, sat_turns = phase_turns("sat", opts.turns)
                sat = await run_phase(opts, stack, client, tenant, sat_turns, None, "saturation")
                log(opts, "# " + json.dumps(sat))
                config: dict[str, Any] = {"extract_replicas": replicas, "saturation": sat}
                for share in SHARES:
                    rate = round(share * sat["turns_per_s"], 1)
                    name = f"{round(share * 100)}pct"
                    tenant, rated = phase_turns(name, max(1, round(rate * opts.seconds)))
                    log(opts, f"# {replicas} extract: {name} of saturation, {rate} turns/s")
                    row = await run_phase(opts, stack, client, tenant, rated, rate, name)
                    log(opts, "# " + json.dumps(row))
                    config[name] = row
                configs.append(config)
    finally:
        for ps in procs.values():
            for p in ps:
                p.stop()
        with contextlib.suppress(RedisError):  # best-effort clean-up
            await index.drop()
            for t in tenants:
                await graph.delete_tenant(t)
        await redis.aclose()
    return {
        "configs": configs,
        "targets": targets(configs),
        "live": {
            "saturation_turns": opts.turns,
            "phase_seconds": opts.seconds,
            "in_flight": IN_FLIGHT,
            "conversations": CONVERSATIONS,
            "session_turns": opts.session_turns,
            "chunk_idle_s": opts.chunk_idle_s,
            "poll_s": opts.poll_s,
            "topic_partitions": settings.topic_partitions,
        },
        "extractor": "offline",
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
    }


def targets(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The saturation targets on this run (the one-extract configuration): figure, bound,
    whether it holds."""
    if not configs:
        return {}
    one = configs[0]
    rate = one["saturation"]["turns_per_cpu_s"]
    p99 = one["80pct"]["fact_fresh_p99_s"]
    return {
        "turns_per_cpu_s": {
            "value": rate,
            "bound": MIN_TURNS_PER_CPU_S,
            "holds": rate >= MIN_TURNS_PER_CPU_S,
        },
        "fact_fresh_p99_s_at_80pct": {
            "value": p99,
            "bound": MAX_FACT_FRESH_P99_S,
            "holds": p99 <= MAX_FACT_FRESH_P99_S,
        },
    }


def docs_section(doc: dict[str, Any]) -> str:
    """The docs' saturation section (a heading, the run, the table, the targets) from ``doc``,
    the report :func:`main` writes."""
    m, live = doc["machine"], doc["live"]
    rows = []
    for c in doc["configs"]:
        sat = c["saturation"]
        cpu = sat["cpu_s_per_1k"]
        share = sat["embedding_share"]
        rows.append(
            f"| {c['extract_replicas']} | {sat['turns_per_s']:.1f} | "
            + " | ".join(f"{cpu[s]:.1f} ({share[s]:.0%})" for s in STAGES)
            + f" | {sat['turns_per_cpu_s']:.1f} | {sat['redis_bytes_per_turn']:,} | "
            + " | ".join(
                f"{c[p]['fact_fresh_p50_s']:.2f} / {c[p]['fact_fresh_p99_s']:.2f}"
                for p in ("50pct", "80pct")
            )
            + " |"
        )
    held = [
        f"- {name.replace('_', ' ')}: {t['value']:g} against {t['bound']:g} — "
        f"{'holds' if t['holds'] else '**does not hold**'}"
        for name, t in doc.get("targets", {}).items()
    ]
    return "\n".join(
        [
            "## Pipeline at saturation",
            "",
            f"Run on {doc['date']} with `{doc['command']}` ({m['cpus']} CPUs, {m['cpu']}): "
            "ingest, extract and reflect as processes on the embedded stack (Redis and the "
            f"broker on the same machine), the offline extractor, {live['topic_partitions']} "
            "partitions per topic. Saturation: "
            f"{live['saturation_turns']:,} turns produced as fast as the pipeline takes them "
            f"(at most {live['in_flight']:,} sent and not yet extracted) over "
            f"{live['conversations']} conversations (sessions of {live['session_turns']} turns), "
            "timed until every one is extracted and reflected. Then "
            f"{live['phase_seconds']:g} s of turns at 50 % and at 80 % of that rate; fact "
            "freshness is from sending a turn until its chunk's facts are stored (polled every "
            f"{live['poll_s']:g} s). CPU: user + system of the stage's processes over the "
            "saturation run; in brackets the share of it spent in MiniLM embedding calls (off the "
            "event loop's thread).",
            "",
            "| extract replicas | turns/s | CPU s / 1k turns: ingest | extract | reflect | "
            "turns / CPU s (3 stages) | Redis bytes / turn | fact fresh p50 / p99 s at 50 % | "
            "at 80 % |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            *(["", "Targets on this run (one extract process):", "", *held] if held else []),
        ]
    )


def main(opts: Options) -> dict[str, Any]:
    import os

    url = opts.redis_url or os.environ.get("GAAMA_REDIS_URL")
    boot = opts.kafka_bootstrap or os.environ.get("GAAMA_KAFKA_BOOTSTRAP")
    if not (url and boot):
        url = boot = None
    with servers(url, boot, need_kafka=True) as (redis_url, bootstrap):
        doc = asyncio.run(_run(opts, redis_url, bootstrap))
    if opts.json_path:
        opts.json_path.parent.mkdir(parents=True, exist_ok=True)
        opts.json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if opts.docs:
        write_docs(doc, opts.docs)
    return doc


def write_docs(doc: dict[str, Any], path: Path) -> None:
    """Put :func:`docs_section` of ``doc`` between the saturation markers of ``path``."""
    write_section(path, DOCS_BEGIN, DOCS_END, docs_section(doc))
