"""``python -m benchmarks pipeline``: the whole pipeline as one benchmark, per tenant size.

The embedded stack (unless ``--redis-url``/``--kafka-bootstrap`` name running servers) and all
four services as processes (ingest, extract, reflect, query; the offline extractor, or the LLM
extractor against the fake OpenAI server with ``--llm-latency``). For each size in ``--sizes``
a tenant is pre-filled with that many turns, then ``--turns`` new turns are produced to the
turns topic at a steady ``--rate`` over ``--conversations`` new conversations (sessions of
``--session-turns`` turns, the last one marked end-of-session). Per size it reports:

- ``turns_per_s``: the live turns over the time from the first send until every one is through
  extraction and reflection (no open chunk, the outbox empty);
- ``cpu_s_per_1k``: CPU seconds (user + system, from ``/proc/<pid>/stat``) each of ingest,
  extract and reflect spent over that time, per 1,000 turns;
- freshness, from sending a turn until the query API lists (``GET /v1/memories``, served from
  the vector index, so the node is searchable) its episode, and a fact citing it (p50 / p99;
  turns that yield no fact count only for the episode figures). Polled every ``--poll-s``.

Pre-fill: the synthetic graph of the query benchmark (:mod:`benchmarks.synthetic`: episodes in
NEXT chains, facts with DERIVED_FROM and ``sources``, heavy-tailed concepts, reflections), the
size counting its episodes, written through :class:`~gaama.store.bulk.BulkLoader` (one
MULTI/EXEC per batch), with topic-clustered vectors instead of MiniLM: running tens of thousands
of turns through the services first would take hours. The graph has the shape and sizes the pipeline
builds (node and edge kinds, degrees, index size); its texts and vectors are synthetic, except
that its most connected concepts carry the labels the offline extractor gives the live turns, so
the live facts join concepts that already hold thousands of edges (the case whose cost grows
with the tenant).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from redis.exceptions import RedisError

from benchmarks.query import load_tenant, machine_info, percentile, servers, write_section
from benchmarks.synthetic import SHARES, SyntheticGraph, speakers, turn_texts
from gaama import ids
from gaama.config import ApiKey, Settings, hash_api_key, load_settings
from gaama.errors import ConfigError
from gaama.events import TOPIC_TURNS, TurnReceived, conversation_key, encode, parse_time, topic_name
from gaama.launch import ServiceProcess
from gaama.model import NodeKind
from gaama.store import connect
from gaama.store.chunks import ChunkStore
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.outbox import Outbox
from gaama.store.vectors import VectorIndex

if TYPE_CHECKING:
    from benchmarks import SubParsers

DOCS_BEGIN, DOCS_END = "<!-- pipeline:begin -->", "<!-- pipeline:end -->"
LLM_DOCS_BEGIN, LLM_DOCS_END = "<!-- pipeline-llm:begin -->", "<!-- pipeline-llm:end -->"
#: The pipeline's targets: CPU per turn at the largest tenant over the smallest, per service; one
#: extract process's offline rate; fact freshness p99 over (chunk idle time + LLM latency).
MAX_CPU_RATIO = 1.3
MIN_EXTRACT_TURNS_PER_S = 100.0
MAX_FACT_FRESH_FACTOR = 3.0
STAGES = ("ingest", "extract", "reflect")
DEFAULT_SIZES = (1000, 10000, 50000)
DEFAULT_TURNS = 300
STALL_TIMEOUT_S = 180.0  # nothing new for this long: the pipeline is stuck, give up
WARM_TENANT = "bench-warm"
LIST_LIMIT = 200
PROGRESS_EVERY_S = 5.0  # the query API's page size cap
_EPOCH = datetime(2026, 1, 5, tzinfo=UTC).timestamp()  # live turns come after the pre-fill


@dataclass(slots=True)
class Options:
    sizes: tuple[int, ...] = DEFAULT_SIZES
    turns: int = DEFAULT_TURNS  # live turns per size
    rate: float = 10.0  # turns/s produced
    conversations: int = 10
    session_turns: int = 5
    chunk_idle_s: float = 2.0
    llm_latency: float | None = None
    llm_concurrency: int | None = None  # GAAMA_LLM_CONCURRENCY of extract and reflect
    poll_s: float = 0.5
    redis_url: str | None = None
    kafka_bootstrap: str | None = None
    json_path: Path | None = Path("bench-results/pipeline.json")
    docs: Path | None = None
    progress: bool = True
    command: str = ""


# --- CPU of the service processes ---------------------------------------------------------------


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far; of its thread
    ``thread`` only when given."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    stat = Path(path).read_text()
    # the command name (field 2) may hold spaces; the fields after its ")" are fixed
    fields = stat.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of proc(5))
    return ticks / os.sysconf("SC_CLK_TCK")


# --- freshness ----------------------------------------------------------------------------------

#: ``(conversation) -> [(node id, kind)]``: what the query API lists for a conversation.
Lister = Callable[[str], Awaitable[list[tuple[str, str]]]]
#: ``(fact ids) -> {fact id: source episode ids}``.
Sources = Callable[[list[str]], Awaitable[dict[str, list[str]]]]


@dataclass
class Freshness:
    """When each sent turn's episode, and a first fact citing it, became listed.

    :meth:`sent` records a send; :meth:`poll` lists the conversations that still wait for
    something and stamps what appeared since the last poll with ``clock()``. The figures are
    then ``seen - sent`` per turn, so their resolution is the polling interval.
    """

    list_conversation: Lister
    fact_sources: Sources
    clock: Callable[[], float] = time.perf_counter
    sent_at: dict[str, float] = field(default_factory=dict)  # episode id -> send time
    conversation_of: dict[str, str] = field(default_factory=dict)
    episode_seen: dict[str, float] = field(default_factory=dict)
    fact_seen: dict[str, float] = field(default_factory=dict)  # episode id -> first fact seen
    facts_known: set[str] = field(default_factory=set)
    done_conversations: set[str] = field(default_factory=set)

    def sent(self, episode_id: str, conversation: str, at: float | None = None) -> None:
        self.sent_at[episode_id] = self.clock() if at is None else at
        self.conversation_of[episode_id] = conversation
        self.done_conversations.discard(conversation)

    def waiting(self) -> list[str]:
        """Conversations with a sent turn whose episode is not listed yet, or not yet settled."""
        convs = dict.fromkeys(self.conversation_of.values())
        return [c for c in convs if c not in self.done_conversations]

    async def poll(self, settled: Iterable[str] = ()) -> None:
        """List every waiting conversation once; ``settled`` ones (no open chunk, nothing left
        to reflect) stop being listed after this poll."""
        now_settled = set(settled)
        for conv in self.waiting():
            items = await self.list_conversation(conv)
            now = self.clock()
            new_facts = []
            for node_id, kind in items:
                if kind == NodeKind.EPISODE.value:
                    if node_id in self.sent_at and node_id not in self.episode_seen:
                        self.episode_seen[node_id] = now
                elif kind == NodeKind.FACT.value and node_id not in self.facts_known:
                    new_facts.append(node_id)
            if new_facts:
                for sources in (await self.fact_sources(new_facts)).values():
                    for eid in sources:
                        if eid in self.sent_at and eid not in self.fact_seen:
                            self.fact_seen[eid] = now
                self.facts_known.update(new_facts)
            mine = [e for e, c in self.conversation_of.items() if c == conv]
            if conv in now_settled and all(e in self.episode_seen for e in mine):
                self.done_conversations.add(conv)

    def all_episodes_seen(self) -> bool:
        return len(self.episode_seen) == len(self.sent_at)

    def figures(self) -> dict[str, Any]:
        ep = [self.episode_seen[e] - s for e, s in self.sent_at.items() if e in self.episode_seen]
        fa = [self.fact_seen[e] - s for e, s in self.sent_at.items() if e in self.fact_seen]
        return {
            "episode_fresh_p50_s": round(percentile(ep, 50), 3),
            "episode_fresh_p99_s": round(percentile(ep, 99), 3),
            "fact_fresh_p50_s": round(percentile(fa, 50), 3),
            "fact_fresh_p99_s": round(percentile(fa, 99), 3),
            "turns_with_facts": len(fa),
        }


# --- the live turns -----------------------------------------------------------------------------


def live_labels(turns: Sequence[TurnReceived]) -> list[str]:
    """The concept labels the offline extractor gives ``turns``, most frequent first."""
    from collections import Counter

    from gaama.extract.concepts import extract_concepts

    counts: Counter[str] = Counter()
    for t in turns:
        counts.update(extract_concepts(t.text, [t.speaker], 3))
    return [label for label, _ in counts.most_common()]


class PrefillGraph(SyntheticGraph):
    """The synthetic graph with its most connected concepts named as the offline extractor
    names the live turns' topics, so that the live chunks' facts join concepts that already
    hold thousands of facts, as they would in a tenant that has talked about them for long."""

    def __init__(self, tenant: str, nodes: int, labels: Sequence[str], seed: int) -> None:
        super().__init__(tenant, nodes, seed=seed)
        weights = np.diff(self._cdf, prepend=0.0)
        top = [int(i) for i in np.argsort(-weights, kind="stable")[: len(labels)]]
        named = dict(zip(top, labels, strict=False))
        taken = set(named.values())
        for i, label in enumerate(self.concept_labels):
            if i in named:
                self.concept_labels[i] = named[i]
            elif label in taken:
                self.concept_labels[i] = f"{label}_{i}"
        self.concept_ids = [ids.concept_id(tenant, lab) for lab in self.concept_labels]


def live_turns(tenant: str, n: int, conversations: int, session_turns: int) -> list[TurnReceived]:
    """``n`` turns dealt round-robin over ``conversations`` new conversations of ``tenant``;
    every ``session_turns``-th turn of a conversation ends its session."""
    texts = turn_texts(n, seed=7)
    out = []
    for i, text in enumerate(texts):
        c = i % conversations
        k = i // conversations
        session, turn = divmod(k, session_turns)
        out.append(
            TurnReceived(
                tenant=tenant,
                conversation=f"live-{c:03d}",
                turn_id=f"D{session + 1}:{turn + 1}",
                speaker=speakers(c)[k % 2],
                text=text,
                timestamp=parse_time(_EPOCH + 60.0 * i),
                end_of_session=turn == session_turns - 1,
            )
        )
    return out


async def produce_steady(
    bootstrap: str, topic: str, turns: Sequence[TurnReceived], rate: float, fresh: Freshness
) -> float:
    """Send ``turns`` at ``rate`` a second (acks=all), stamping each send; the seconds taken."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    started = time.perf_counter()
    futures = []
    try:
        for i, t in enumerate(turns):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            fresh.sent(ids.episode_id(t.tenant, t.conversation, t.turn_id), t.conversation)
            key = conversation_key(t.tenant, t.conversation)
            futures.append(await producer.send(topic, value=encode(t), key=key))
        await producer.flush()
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return time.perf_counter() - started


# --- one run --------------------------------------------------------------------------------


@dataclass
class Stack:
    settings: Settings
    graph: GraphStore
    chunks: ChunkStore
    outbox: Outbox
    query_url: str
    api_key: dict[str, str]  # tenant -> its API key
    pids: dict[str, int]


async def settled(stack: Stack, tenant: str, episode_ids: list[str]) -> bool:
    """Whether every one of ``episode_ids`` is extracted (its chunk closed) and reflected (no
    chunk of the tenant left in the outbox). Checked in that order: a chunk leaves the outbox
    only after it was written."""
    marks = await stack.graph.get_fields(tenant, episode_ids, ["chunk"])
    if len(marks) < len(episode_ids) or await stack.chunks.open_conversations(tenant):
        return False
    return not await stack.outbox.pending(tenant)


def http_lister(client: Any, url: str, key: str) -> Lister:
    async def list_conversation(conv: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"conversation": conv, "limit": LIST_LIMIT}
            if cursor:
                params["cursor"] = cursor
            r = await client.get(
                f"{url}/v1/memories", params=params, headers={"Authorization": f"Bearer {key}"}
            )
            r.raise_for_status()
            page = r.json()
            out += [(m["id"], m["kind"]) for m in page["items"]]
            if not (cursor := page.get("next_cursor")):
                return out

    return list_conversation


def store_sources(graph: GraphStore, tenant: str) -> Sources:
    async def sources(fact_ids: list[str]) -> dict[str, list[str]]:
        rows = await graph.get_fields(tenant, fact_ids, ["sources"])
        return {f: (r[0] or b"").decode().split(",") for f, r in rows.items() if r[0]}

    return sources


async def run_size(
    opts: Options, stack: Stack, tenant: str, size: int, client: Any
) -> dict[str, Any]:
    topic = topic_name(TOPIC_TURNS, stack.settings.topic_prefix)
    turns = live_turns(tenant, opts.turns, opts.conversations, opts.session_turns)
    fresh = Freshness(
        http_lister(client, stack.query_url, stack.api_key[tenant]),
        store_sources(stack.graph, tenant),
    )
    cpu_before = {s: cpu_seconds(pid) for s, pid in stack.pids.items()}
    started = time.perf_counter()
    producing = asyncio.create_task(
        produce_steady(stack.settings.kafka_bootstrap_servers, topic, turns, opts.rate, fresh)
    )
    last_change, last_count = time.perf_counter(), -1
    done_at = None
    shown = started
    while True:
        await asyncio.sleep(opts.poll_s)
        sent_all = producing.done()
        if sent_all:
            producing.result()  # a failed send ends the run here
        quiet = sent_all and await settled(stack, tenant, list(fresh.sent_at))
        await fresh.poll(fresh.waiting() if quiet else ())
        progress = len(fresh.episode_seen) + len(fresh.fact_seen)
        if progress != last_count:
            last_change, last_count = time.perf_counter(), progress
        if opts.progress and time.perf_counter() - shown >= PROGRESS_EVERY_S:
            shown = time.perf_counter()
            print(
                f"  {size:,}-turn tenant, {shown - started:.0f} s: sent {len(fresh.sent_at)}/"
                f"{len(turns)}, episodes listed {len(fresh.episode_seen)}, turns with a fact "
                f"listed {len(fresh.fact_seen)}",
                file=sys.stderr,
                flush=True,
            )
        if quiet and fresh.all_episodes_seen():
            if done_at is None:
                done_at = time.perf_counter()
            if not fresh.waiting():
                break
        if time.perf_counter() - last_change > STALL_TIMEOUT_S:
            raise ConfigError(f"the pipeline stalled for {STALL_TIMEOUT_S:.0f} s at size {size}")
    assert done_at is not None
    wall = done_at - started
    cpu = {s: cpu_seconds(pid) - cpu_before[s] for s, pid in stack.pids.items()}
    row: dict[str, Any] = {
        "tenant_turns": size,
        "turns": len(turns),
        "seconds": round(wall, 2),
        "turns_per_s": round(len(turns) / wall, 1),
        "produce_rate": opts.rate,
        "cpu_s_per_1k": {s: round(cpu[s] / len(turns) * 1000, 2) for s in STAGES},
    }
    row |= fresh.figures()
    # CPU-bound capacity of one extract process at this tenant size (its share of a core).
    ex = cpu["extract"] / len(turns)
    row["extract_turns_per_cpu_s"] = round(1 / ex, 1) if ex else 0.0
    return row


def llm_env(base_url: str) -> dict[str, str]:
    return {
        "GAAMA_LLM_BASE_URL": base_url,
        "GAAMA_LLM_MODEL": "fake-model",
        "GAAMA_LLM_API_KEY": "sk-bench",
    }


async def _run(
    opts: Options, redis_url: str, bootstrap: str, llm_url: str | None
) -> dict[str, Any]:
    from gaama.devstack import create_topics

    run_id = uuid.uuid4().hex[:6]
    prefix = f"gbench{run_id}"
    tenants = {n: f"bench-p{n}" for n in opts.sizes}
    keys_of = {t: f"bench-key-{run_id}-{t}" for t in [*tenants.values(), WARM_TENANT]}
    settings = load_settings(
        redis_url=redis_url,
        kafka_bootstrap=bootstrap,
        key_prefix=prefix,
        index_name=f"{prefix}-idx",
        topic_prefix=f"{prefix}.",
        chunk_idle_s=opts.chunk_idle_s,
        api_keys=[ApiKey(key_sha256=hash_api_key(k), tenant=t) for t, k in keys_of.items()],
    )
    await create_topics(bootstrap, settings.topic_partitions, settings.topic_prefix)
    keys = Keys(prefix)
    redis = connect(redis_url, socket_timeout=600)
    graph = GraphStore(redis, keys)
    index = VectorIndex(redis, settings.index_name, settings.embed_dim, keys)
    await index.ensure()
    log_dir = Path(tempfile.mkdtemp(prefix="gaama-bench-pipeline-"))
    extra = {"GAAMA_TENANT_CONCURRENCY": "0", "GAAMA_TENANT_RATE": "0"}
    if llm_url:
        extra |= llm_env(llm_url)
    if opts.llm_concurrency:
        extra["GAAMA_LLM_CONCURRENCY"] = str(opts.llm_concurrency)
    procs = {
        name: ServiceProcess(name, settings, log_dir, inherit=True, extra=extra)
        for name in ("ingest", "extract", "reflect", "query")
    }
    prefill: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    import httpx

    try:
        for n in opts.sizes:  # pre-fill before the services run: the load is not measured
            nodes = math.ceil(n / SHARES[NodeKind.EPISODE])
            labels = live_labels(
                live_turns(tenants[n], opts.turns, opts.conversations, opts.session_turns)
            )
            graph_of = PrefillGraph(tenants[n], nodes, labels, seed=n)
            loaded = await load_tenant(
                redis, keys, tenants[n], nodes, progress=False, synthetic=graph_of
            )
            prefill[str(n)] = {"nodes": nodes, "seconds": round(loaded["seconds"], 1)}
            prefill[str(n)] |= {"graph": loaded["graph"]}
            print(f"# pre-filled {n:,} turns ({nodes:,} nodes) in {loaded['seconds']:.0f} s")
        for p in procs.values():
            await p.astart(240)
        stack = Stack(
            settings=settings,
            graph=graph,
            chunks=ChunkStore(redis, keys),
            outbox=Outbox(redis, keys),
            query_url=procs["query"].url,
            api_key=keys_of,
            pids={s: p.proc.pid for s in STAGES if (p := procs[s]).proc is not None},
        )
        async with httpx.AsyncClient(timeout=60) as client:
            # A warm-up through every stage on the smallest tenant (models loaded, consumer
            # groups assigned, first chunks closed) before anything is timed.
            warm = replace_opts(opts, turns=2 * opts.conversations, rate=max(opts.rate, 20.0))
            await run_size(warm, stack, WARM_TENANT, 0, client)
            for n in opts.sizes:
                row = await run_size(opts, stack, tenants[n], n, client)
                print(json.dumps(row))
                runs.append(row)
    finally:
        for p in procs.values():
            p.stop()
        with contextlib.suppress(RedisError):  # best-effort clean-up
            await index.drop()
            for t in keys_of:
                await graph.delete_tenant(t)
        await redis.aclose()
    return {
        "runs": runs,
        "ratios_largest_vs_smallest": ratios(runs),
        "targets": targets(runs, opts),
        "prefill": prefill,
        "live": {
            "turns": opts.turns,
            "rate": opts.rate,
            "conversations": opts.conversations,
            "session_turns": opts.session_turns,
            "chunk_idle_s": opts.chunk_idle_s,
            "poll_s": opts.poll_s,
        },
        "extractor": "llm" if llm_url else "offline",
        "llm_latency_s": opts.llm_latency,
        "llm_concurrency": opts.llm_concurrency,
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
    }


def replace_opts(opts: Options, **changes: Any) -> Options:
    from dataclasses import replace

    return replace(opts, progress=False, **changes)


def ratios(runs: list[dict[str, Any]]) -> dict[str, float]:
    """CPU per turn of the largest tenant over the smallest's, per service."""
    if len(runs) < 2:
        return {}
    small, large = runs[0], runs[-1]
    return {
        s: round(large["cpu_s_per_1k"][s] / small["cpu_s_per_1k"][s], 2)
        for s in STAGES
        if small["cpu_s_per_1k"][s]
    }


def targets(runs: list[dict[str, Any]], opts: Options) -> dict[str, Any]:
    """Each target of the pipeline this run can judge: the figure, the bound, whether it holds."""
    out: dict[str, Any] = {}
    if len(runs) >= 2:
        worst = max(ratios(runs).values(), default=0.0)
        out["cpu_ratio_largest_vs_smallest"] = {
            "value": worst,
            "bound": MAX_CPU_RATIO,
            "holds": worst <= MAX_CPU_RATIO,
        }
    if runs and opts.llm_latency is None:
        rate = min(r["extract_turns_per_cpu_s"] for r in runs)
        out["extract_turns_per_cpu_s"] = {
            "value": rate,
            "bound": MIN_EXTRACT_TURNS_PER_S,
            "holds": rate >= MIN_EXTRACT_TURNS_PER_S,
        }
    if runs and opts.llm_latency is not None:
        bound = MAX_FACT_FRESH_FACTOR * (opts.chunk_idle_s + opts.llm_latency)
        worst_p99 = max(r["fact_fresh_p99_s"] for r in runs)
        out["fact_fresh_p99_s"] = {
            "value": worst_p99,
            "bound": round(bound, 3),
            "holds": worst_p99 <= bound,
        }
    return out


def docs_section(doc: dict[str, Any]) -> str:
    m, live = doc["machine"], doc["live"]
    extractor = (
        f"the LLM extractor against the fake OpenAI server answering after "
        f"{doc['llm_latency_s']:g} s"
        if doc["extractor"] == "llm"
        else "the offline extractor"
    )
    rows = [
        f"| {r['tenant_turns']:,} | {r['turns_per_s']:.1f} | {r['cpu_s_per_1k']['ingest']:.1f} | "
        f"{r['cpu_s_per_1k']['extract']:.1f} | {r['cpu_s_per_1k']['reflect']:.1f} | "
        f"{r['episode_fresh_p50_s']:.2f} / {r['episode_fresh_p99_s']:.2f} | "
        f"{r['fact_fresh_p50_s']:.2f} / {r['fact_fresh_p99_s']:.2f} |"
        for r in doc["runs"]
    ]
    ratio = ", ".join(f"{s} {v:.2f}×" for s, v in doc["ratios_largest_vs_smallest"].items())
    held = [
        f"- {name.replace('_', ' ')}: {t['value']:g} against {t['bound']:g} — "
        f"{'holds' if t['holds'] else '**does not hold**'}"
        for name, t in doc.get("targets", {}).items()
    ]
    title = "### With a 1 s LLM" if doc["extractor"] == "llm" else "## Pipeline"
    return "\n".join(
        [
            title,
            "",
            f"Run on {doc['date']} with `{doc['command']}` ({m['cpus']} CPUs, {m['cpu']}): the "
            f"four services as processes on the embedded stack, {extractor}. Each tenant was "
            "pre-filled with the synthetic graph of the query benchmark (its size in turns = "
            "episodes; written with the bulk loader, synthetic vectors), then "
            f"{live['turns']:,} new turns were produced at {live['rate']:g} turns/s over "
            f"{live['conversations']} conversations (sessions of {live['session_turns']} turns, "
            f"chunk idle time {live['chunk_idle_s']:g} s). Freshness: from sending a turn until "
            "the query API lists its episode / a fact citing it (polled every "
            f"{live['poll_s']:g} s).",
            "",
            "| tenant turns | turns/s | CPU s / 1k turns: ingest | extract | reflect | "
            "episode fresh p50 / p99 s | fact fresh p50 / p99 s |",
            "|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"CPU per turn, largest tenant over smallest: {ratio or 'n/a'}. One extract "
            "process's rate if it had a core to itself (turns over its CPU seconds): "
            + ", ".join(f"{r['extract_turns_per_cpu_s']:.0f}" for r in doc["runs"])
            + " turns/s.",
            *(["", "Targets on this run:", "", *held] if held else []),
        ]
    )


def main(opts: Options) -> dict[str, Any]:
    url = opts.redis_url or os.environ.get("GAAMA_REDIS_URL")
    boot = opts.kafka_bootstrap or os.environ.get("GAAMA_KAFKA_BOOTSTRAP")
    if not (url and boot):
        url = boot = None
    with servers(url, boot, need_kafka=True) as (redis_url, bootstrap):
        if opts.llm_latency is None:
            doc = asyncio.run(_run(opts, redis_url, bootstrap, None))
        else:
            from tests.fakes.openai_server import FakeOpenAIServer

            with FakeOpenAIServer(latency_s=opts.llm_latency) as llm:
                doc = asyncio.run(_run(opts, redis_url, bootstrap, llm.base_url))
    if opts.json_path:
        opts.json_path.parent.mkdir(parents=True, exist_ok=True)
        opts.json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if opts.docs:
        begin, end = (
            (LLM_DOCS_BEGIN, LLM_DOCS_END)
            if opts.llm_latency is not None
            else (DOCS_BEGIN, DOCS_END)
        )
        write_section(opts.docs, begin, end, docs_section(doc))
    return doc


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("sizes must be positive integers")
    return sizes


def command_line(args: argparse.Namespace) -> str:
    argv = ["python", "-m", "benchmarks", "pipeline"]
    argv += ["--sizes", ",".join(str(s) for s in args.sizes), "--turns", str(args.turns)]
    argv += ["--rate", f"{args.rate:g}", "--conversations", str(args.conversations)]
    argv += ["--session-turns", str(args.session_turns), "--chunk-idle-s", f"{args.chunk_idle_s:g}"]
    if args.llm_latency is not None:
        argv += ["--llm-latency", f"{args.llm_latency:g}"]
    if args.llm_concurrency:
        argv += ["--llm-concurrency", str(args.llm_concurrency)]
    if args.write_docs:
        argv.append("--write-docs")
    return shlex.join(argv)


def _cli(args: argparse.Namespace) -> int:
    if args.saturate:
        return _saturate_cli(args)
    if args.turns is None:
        args.turns = DEFAULT_TURNS
    if args.turns < 1 or args.rate <= 0 or args.conversations < 1 or args.session_turns < 1:
        print(
            "python -m benchmarks pipeline: --turns, --rate, --conversations and "
            "--session-turns must be positive",
            file=sys.stderr,
        )
        return 2
    opts = Options(
        sizes=args.sizes,
        turns=args.turns,
        rate=args.rate,
        conversations=args.conversations,
        session_turns=args.session_turns,
        chunk_idle_s=args.chunk_idle_s,
        llm_latency=args.llm_latency,
        llm_concurrency=args.llm_concurrency,
        poll_s=args.poll_s,
        redis_url=args.redis_url,
        kafka_bootstrap=args.kafka_bootstrap,
        json_path=Path(
            args.json
            or (
                "bench-results/pipeline-llm.json"
                if args.llm_latency
                else "bench-results/pipeline.json"
            )
        ),
        docs=Path(args.docs) if args.write_docs else None,
        progress=not args.no_progress,
        command=command_line(args),
    )
    main(opts)  # a GaamaError (a stalled pipeline) is reported by gaama.cli.run
    return 0


def _saturate_cli(args: argparse.Namespace) -> int:
    from benchmarks import saturate

    turns = saturate.DEFAULT_TURNS if args.turns is None else args.turns
    if turns < 1 or args.seconds <= 0 or args.session_turns < 1:
        print(
            "python -m benchmarks pipeline --saturate: --turns, --seconds and --session-turns "
            "must be positive",
            file=sys.stderr,
        )
        return 2
    argv = ["python", "-m", "benchmarks", "pipeline", "--saturate", "--turns", str(turns)]
    argv += ["--seconds", f"{args.seconds:g}", "--replicas", ",".join(map(str, args.replicas))]
    if args.write_docs:
        argv.append("--write-docs")
    opts = saturate.Options(
        turns=turns,
        seconds=args.seconds,
        replicas=args.replicas,
        session_turns=args.session_turns,
        chunk_idle_s=args.chunk_idle_s,
        poll_s=min(args.poll_s, saturate.DEFAULT_POLL_S),
        redis_url=args.redis_url,
        kafka_bootstrap=args.kafka_bootstrap,
        json_path=Path(args.json or "bench-results/pipeline-saturate.json"),
        docs=Path(args.docs) if args.write_docs else None,
        progress=not args.no_progress,
        command=shlex.join(argv),
    )
    saturate.main(opts)
    return 0


def register(sub: SubParsers) -> None:
    """Add the ``pipeline`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "pipeline",
        help="all four services: sustained turns/s, CPU per turn and freshness per tenant size",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--sizes",
        type=_sizes,
        default=DEFAULT_SIZES,
        help="turns already in each tenant, comma-separated (default 1000,10000,50000)",
    )
    p.add_argument(
        "--turns",
        type=int,
        default=None,
        help="live turns per size (default 300); with --saturate, turns of each saturation run "
        "(default 3000)",
    )
    p.add_argument(
        "--saturate",
        action="store_true",
        help="throughput at saturation instead (benchmarks/saturate.py): turns/s, CPU per stage "
        "and freshness at 50 %% and 80 %% of it, with 1 and 2 extract processes",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="with --saturate: produce time of each 50 %% / 80 %% run (default 30)",
    )
    p.add_argument(
        "--replicas",
        type=_sizes,
        default=(1, 2),
        help="with --saturate: extract process counts, comma-separated (default 1,2)",
    )
    p.add_argument("--rate", type=float, default=10.0, help="turns/s produced (default 10)")
    p.add_argument("--conversations", type=int, default=10, help="live conversations per size")
    p.add_argument("--session-turns", type=int, default=5, help="turns per session")
    p.add_argument("--chunk-idle-s", type=float, default=2.0, help="GAAMA_CHUNK_IDLE_S")
    p.add_argument(
        "--llm-latency",
        type=float,
        default=None,
        metavar="S",
        help="use the LLM extractor against the fake OpenAI server answering after S seconds",
    )
    p.add_argument(
        "--llm-concurrency",
        type=int,
        default=None,
        metavar="N",
        help="GAAMA_LLM_CONCURRENCY for extract and reflect (default: the settings' 4)",
    )
    p.add_argument("--poll-s", type=float, default=0.5, help="freshness polling interval")
    p.add_argument("--redis-url", default=None, help="with --kafka-bootstrap: use these servers")
    p.add_argument("--kafka-bootstrap", default=None)
    p.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="default bench-results/pipeline.json (pipeline-llm.json with --llm-latency)",
    )
    p.add_argument(
        "--write-docs", action="store_true", help="update the Pipeline section of the docs"
    )
    p.add_argument("--docs", default="docs/performance.md", help=argparse.SUPPRESS)
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    p.set_defaults(func=_cli)
