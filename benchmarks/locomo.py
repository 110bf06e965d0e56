"""``python -m benchmarks locomo``: evidence recall (and, with an LLM, judged answers) on LoCoMo.

Each conversation is ingested as its own tenant through the write path the services use —
in-process by default (``episode_node`` + ``GraphStore.append_episode``, then the extraction and
reflection pipelines), or through the broker to running services with ``--via-kafka`` — and then
every question of categories 1–4 is asked in each mode on the same graph and embeddings:

- ``flat``: plain RAG, the top turns by cosine (``VectorIndex.knn`` over episodes only);
- ``semantic``: the GAAMA retriever with ``w_ppr = 0``;
- ``gaama``: the GAAMA retriever (hybrid PPR + similarity);
- ``entity-ppr``: a HippoRAG-style passage–entity PPR baseline (:mod:`benchmarks.entity_ppr`).

Metrics are defined in :mod:`benchmarks.metrics`. Without ``GAAMA_REDIS_URL`` the harness starts
its own embedded Redis + broker and stops it at the end; either way the run's keys, index and
topics carry a prefix unique to the run.
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
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from benchmarks.entity_ppr import EntityGraph, Passage
from benchmarks.locomo_data import CATEGORIES, Conversation, Question, load_locomo
from benchmarks.locomo_kafka import (
    EXTRACTOR_UNKNOWN,
    ingest_via_kafka,
    start_services,
)
from benchmarks.locomo_report import docs_section, markdown_table, write_docs
from benchmarks.metrics import (
    KS,
    TOKEN_BUDGETS,
    QuestionScore,
    Tally,
    score_question,
    usable_evidence,
)
from gaama.config import Settings, load_settings
from gaama.embed import Embedder, build_embedder
from gaama.episodes import episode_node, episode_stored
from gaama.errors import ConfigError, ValidationError
from gaama.events import EpisodeStored
from gaama.extract.base import Extractor
from gaama.extract.factory import build_extractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.extract.reflection import ReflectDeps, ReflectionPipeline
from gaama.extract.types import (
    EpisodeView,
    ExtractionContext,
    ExtractionResult,
    ReflectionDraft,
    ReflectionInput,
)
from gaama.launch import ServiceProcess
from gaama.model import EdgeKind, NodeKind
from gaama.retrieval.pack import Caps, Item, Size, pack, render_memory, word_sizes
from gaama.retrieval.search import Retriever
from gaama.store import connect
from gaama.store.bulk import BulkLoader
from gaama.store.chunks import ChunkStore
from gaama.store.codecs import as_text, episode_said
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex

if TYPE_CHECKING:
    from benchmarks import SubParsers

MODES = ("flat", "semantic", "gaama", "entity-ppr")
RANK_K = max(KS)


@dataclass(slots=True)
class Options:
    """What one run does (the command-line arguments)."""

    data: Path
    conversations: list[str] | None = None
    modes: tuple[str, ...] = MODES
    budget: int = 1000
    # The memory is also packed within these token budgets (R@<b>t); () packs by words only.
    token_budgets: tuple[int, ...] = TOKEN_BUDGETS
    via_kafka: bool = False
    start_services: bool | None = None  # None: when the harness owns the stack
    json_path: Path | None = None
    write_docs: Path | None = None
    params: dict[str, Any] = field(default_factory=dict)
    # Named retrieval overrides asked too, on the same graph: each adds semantic and gaama rows
    # labelled ``<mode>:<name>`` (on top of ``params``).
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    progress: bool = True
    command: str = ""
    # Where to write each question's evidence ranks per asked mode (None: not written).
    ranks_path: Path | None = None


@dataclass(slots=True)
class Stores:
    settings: Settings
    graph: GraphStore
    index: VectorIndex
    chunks: ChunkStore
    embedder: Embedder


class RecordingExtractor:
    """Passes calls to ``inner`` and keeps the concept labels it proposed, before the pipeline
    canonicalises them (for the ``concept_duplicates`` figure)."""

    def __init__(self, inner: Extractor) -> None:
        self.inner = inner
        self.name = inner.name
        # Concepts are per tenant, so distinct labels are counted per tenant too.
        self.tenant = ""
        self.labels_by_tenant: dict[str, set[str]] = {}

    async def extract(
        self, chunk: list[EpisodeView], context: ExtractionContext
    ) -> ExtractionResult:
        result = await self.inner.extract(chunk, context)
        for labels in result.episode_concepts.values():
            self.labels_by_tenant.setdefault(self.tenant, set()).update(labels)
        for fact in result.facts:
            self.labels_by_tenant.setdefault(self.tenant, set()).update(fact.concepts)
        return result

    async def reflect(
        self, facts: list[ReflectionInput], existing: list[str]
    ) -> list[ReflectionDraft]:
        return await self.inner.reflect(facts, existing)


# --- ingest ----------------------------------------------------------------------------------


async def ingest_in_process(
    conv: Conversation,
    tenant: str,
    stores: Stores,
    extract: ExtractionPipeline,
    reflect: ReflectionPipeline,
    bar: tqdm[Any],
) -> None:
    """The services' write path, in this process: episodes, then chunks → facts → reflections."""
    s, graph = stores.settings, stores.graph
    turns = conv.turn_events(tenant)
    stored: list[EpisodeStored] = []
    for start in range(0, len(turns), s.embed_batch):
        batch = turns[start : start + s.embed_batch]
        vectors = await stores.embedder.embed([t.episode_text() for t in batch])
        for turn, vec in zip(batch, vectors, strict=True):
            node = episode_node(turn, vec.tolist())
            await graph.append_episode(node)
            stored.append(episode_stored(turn, node))
    for ev in stored:
        # Reflect right after each chunk closes, as the reflect service would.
        for fx in await extract.on_episode(ev):
            await reflect.on_facts(fx)
        bar.update(1)


# --- asking ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Answer:
    """One mode's retrieval for one question, reduced to what is scored."""

    ranked: list[frozenset[str]]  # turn ids covered by each ranked item, best first
    memory: list[frozenset[str]]
    words: int
    latency_ms: float
    memory_text: str
    tokens: int = 0  # of the word budget's memory
    by_tokens: dict[int, list[frozenset[str]]] = field(default_factory=dict)  # by token budget


def covers(item: Item) -> frozenset[str]:
    """Turn ids an item covers: its own (episode), its sources' (fact), none (reflection)."""
    if item.kind is NodeKind.REFLECTION:
        return frozenset()
    return frozenset(p.turn_id for p in item.provenance if p.turn_id)


@dataclass(slots=True)
class ConvIndex:
    """One conversation's episodes loaded from Redis, for the flat and entity-PPR modes."""

    tenant: str
    conversation: Conversation
    passages: list[Passage]
    by_id: dict[str, int]
    times: list[float]
    entity_graph: EntityGraph

    @classmethod
    async def load(cls, stores: Stores, tenant: str, conv: Conversation) -> ConvIndex:
        ids = await stores.graph.chain(tenant, conv.sample_id)
        fields = ["turn_id", "raw", "text", "time", "speaker"]
        rows = await stores.graph.get_fields(tenant, ids, fields)
        vectors = await stores.graph.vectors(tenant, ids, stores.embedder.dim)
        passages, times = [], []
        for i in ids:
            turn, raw, text, t, speaker = (as_text(b) for b in rows.get(i, [None] * len(fields)))
            passages.append(Passage(i, turn, episode_said(raw, text, speaker), text))
            times.append(float(t or 0.0))
        graph = await asyncio.to_thread(EntityGraph, passages, vectors)
        return cls(tenant, conv, passages, {p.id: n for n, p in enumerate(passages)}, times, graph)

    def episode_items(self, ranked: Sequence[tuple[int, float]]) -> list[Item]:
        from gaama.retrieval.pack import Provenance

        out = []
        for seq, (i, score) in enumerate(ranked):
            p = self.passages[i]
            out.append(
                Item(
                    id=p.id,
                    kind=NodeKind.EPISODE,
                    text=p.text,
                    time=self.times[i],
                    conversation=self.conversation.sample_id,
                    seq=i,
                    sim=score,
                    score=-float(seq),  # keep the given order
                    provenance=[Provenance(p.id, p.turn_id)],
                )
            )
        return out


def _episodes_to_budget(items: list[Item], budget: int, size: Size = word_sizes) -> list[Item]:
    return pack(items, Caps(facts=0, reflections=0, episodes=len(items), budget=budget), size)


def _answer(
    ranked: list[Item],
    memory: list[Item],
    latency_ms: float,
    retriever: Retriever,
    by_tokens: dict[int, list[Item]],
) -> Answer:
    return Answer(
        [covers(i) for i in ranked],
        [covers(i) for i in memory],
        sum(i.words for i in memory),
        latency_ms,
        render_memory(memory),
        sum(retriever.token_sizes(memory)),
        {b: [covers(i) for i in m] for b, m in by_tokens.items()},
    )


async def ask(
    mode: str,
    question: str,
    ci: ConvIndex,
    stores: Stores,
    retriever: Retriever,
    budget: int,
    params: dict[str, Any],
    token_budgets: Sequence[int] = (),
) -> Answer:
    """Retrieve for one question in one mode; the latency includes embedding the question (and
    is of the word budget's retrieval: the memory within each of ``token_budgets`` is packed
    after it)."""
    t0 = time.perf_counter()
    if mode in ("semantic", "gaama"):
        res = await retriever.search(
            ci.tenant,
            question,
            mode=mode,  # type: ignore[arg-type]
            budget=budget,
            k=RANK_K,
            params=params or None,
        )
        latency = (time.perf_counter() - t0) * 1000
        by_tokens = {}
        for b in token_budgets:
            packed = await retriever.search(
                ci.tenant,
                question,
                mode=mode,  # type: ignore[arg-type]
                budget=b,
                budget_unit="tokens",
                k=RANK_K,
                params=params or None,
            )
            by_tokens[b] = packed.memory
        return _answer(res.ranked, res.memory, latency, retriever, by_tokens)
    qvec = (await stores.embedder.embed([question]))[0]
    if mode == "flat":
        # Enough turns to fill the budget at a few words a turn.
        pool = max(2 * RANK_K, budget // 5)
        hits = await stores.index.knn(ci.tenant, qvec, pool, kinds=[NodeKind.EPISODE])
        ranked = [(ci.by_id[h.id], h.similarity) for h in hits if h.id in ci.by_id]
    elif mode == "entity-ppr":
        ranked = await asyncio.to_thread(ci.entity_graph.rank, question, np.asarray(qvec))
    else:
        raise ValidationError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    items = ci.episode_items(ranked)
    memory = _episodes_to_budget(items, budget)
    latency = (time.perf_counter() - t0) * 1000
    by_tokens = {b: _episodes_to_budget(items, b, retriever.token_sizes) for b in token_budgets}
    return _answer(items[:RANK_K], memory, latency, retriever, by_tokens)


# --- the run ---------------------------------------------------------------------------------


@dataclass(slots=True)
class RunResult:
    tallies: dict[str, Tally]
    skipped: int
    graph: dict[str, Any]
    concept_duplicates: dict[str, int | None]
    extractor: str
    seconds: dict[str, float]
    conversations: list[str]
    questions: int
    ranks: list[dict[str, Any]] = field(default_factory=list)


async def graph_stats(stores: Stores, tenants: Sequence[str]) -> dict[str, Any]:
    """Nodes by kind and edges by kind (each edge counted once, at its source)."""
    counts = dict.fromkeys(("episodes", "facts", "concepts", "reflections"), 0)
    edges = dict.fromkeys([k.value for k in EdgeKind], 0)
    bulk = BulkLoader(stores.graph)
    for tenant in tenants:
        by_kind = await stores.index.count(tenant)
        for kind, name in (
            (NodeKind.EPISODE, "episodes"),
            (NodeKind.FACT, "facts"),
            (NodeKind.CONCEPT, "concepts"),
            (NodeKind.REFLECTION, "reflections"),
        ):
            counts[name] += by_kind.get(kind.value, 0)
        for edge_kind, n in (await bulk.edge_counts(tenant)).items():
            if edge_kind in edges:
                edges[edge_kind] += n
    return {**counts, "edges": edges}


async def run(
    opts: Options,
    stores: Stores,
    conversations: list[Conversation],
    tenants: dict[str, str],
    extractor: RecordingExtractor | None,
    judge: Any | None,
) -> RunResult:
    """Ingest, ask, score. ``extractor`` is None with ``--via-kafka`` (the services extract)."""
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    total_turns = sum(c.n_turns for c in conversations)
    with tqdm(
        total=total_turns,
        desc="ingest + extract",
        unit="turn",
        disable=not opts.progress,
        file=sys.stderr,
    ) as bar:
        extractor_name = extractor.name if extractor is not None else EXTRACTOR_UNKNOWN
        if extractor is None:
            extractor_name = await ingest_via_kafka(
                stores.settings, stores.graph, stores.chunks, conversations, tenants, bar
            )
        else:
            chunks = stores.chunks
            s = stores.settings
            extract = ExtractionPipeline(
                ExtractDeps(s, stores.graph, stores.index, chunks, stores.embedder, extractor)
            )
            reflect = ReflectionPipeline(
                ReflectDeps(s, stores.graph, stores.index, stores.embedder, extractor)
            )
            for conv in conversations:
                extractor.tenant = tenants[conv.sample_id]
                await ingest_in_process(
                    conv, tenants[conv.sample_id], stores, extract, reflect, bar
                )
    seconds["ingest"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    stats = await graph_stats(stores, list(tenants.values()))
    raw = (
        sum(len(labels) for labels in extractor.labels_by_tenant.values())
        if extractor is not None
        else None
    )
    dup = {
        "raw_labels": raw,
        "after_canonicalisation": stats["concepts"],
        "removed": raw - stats["concepts"] if raw is not None else None,
    }
    retriever = Retriever(stores.graph, stores.index, stores.embedder, stores.settings)
    asks = [(m, m, opts.params) for m in opts.modes]
    for name, extra in opts.variants.items():
        asks += [
            (f"{m}:{name}", m, {**opts.params, **extra})
            for m in opts.modes
            if m in ("semantic", "gaama")
        ]
    tallies = {label: Tally() for label, _, _ in asks}
    skipped = asked = 0
    pending: list[tuple[str, Question, Answer, QuestionScore]] = []
    ranks: list[dict[str, Any]] = []
    questions = [(c, q) for c in conversations for q in c.questions if q.category in CATEGORIES]
    indexes = {
        c.sample_id: await ConvIndex.load(stores, tenants[c.sample_id], c) for c in conversations
    }
    for conv, q in tqdm(
        questions, desc="questions", unit="q", disable=not opts.progress, file=sys.stderr
    ):
        evidence = usable_evidence(q.evidence, conv.turn_ids)
        if not evidence:
            skipped += 1
            continue
        asked += 1
        row: dict[str, Any] = {
            "conversation": conv.sample_id,
            "question": q.question,
            "category": q.category,
            "evidence": evidence,
        }
        for label, mode, params in asks:
            a = await ask(
                mode,
                q.question,
                indexes[conv.sample_id],
                stores,
                retriever,
                opts.budget,
                params,
                opts.token_budgets,
            )
            score = score_question(
                q.category,
                a.ranked,
                a.memory,
                evidence,
                a.words,
                a.latency_ms,
                a.by_tokens,
                a.tokens,
            )
            tallies[label].add(score)
            pending.append((label, q, a, score))
            row[label] = evidence_ranks(a, evidence)
        ranks.append(row)
    seconds["questions"] = time.perf_counter() - t1
    if judge is not None:
        t2 = time.perf_counter()
        await answer_and_judge(judge, pending, stores.settings.llm_concurrency, opts.progress)
        seconds["answer_judge"] = time.perf_counter() - t2
    seconds["total"] = time.perf_counter() - t0
    return RunResult(
        tallies,
        skipped,
        stats,
        dup,
        extractor_name,
        seconds,
        [c.sample_id for c in conversations],
        asked,
        ranks,
    )


def evidence_ranks(answer: Answer, evidence: Sequence[str]) -> dict[str, Any]:
    """Each evidence turn's rank (1-based) in the ranked list, None past its end, and whether
    the packed memory covers it: where a question's evidence stands, not only whether it counts."""
    return {
        "rank": {
            e: next((n for n, c in enumerate(answer.ranked, 1) if e in c), None) for e in evidence
        },
        "memory": {e: any(e in c for c in answer.memory) for e in evidence},
    }


async def answer_and_judge(
    judge: Any,
    pending: list[tuple[str, Question, Answer, QuestionScore]],
    concurrency: int,
    progress: bool,
) -> None:
    """Answer each question from its packed memory and grade the answer (an LLM each)."""
    sem = asyncio.Semaphore(concurrency)
    bar = tqdm(
        total=len(pending), desc="answer + judge", unit="q", disable=not progress, file=sys.stderr
    )

    async def one(q: Question, a: Answer, score: QuestionScore) -> None:
        async with sem:
            candidate = await judge.answer(q.question, a.memory_text)
            score.reward, score.correct = await judge.judge(q.question, q.answer, candidate)
        bar.update(1)

    try:
        await asyncio.gather(*(one(q, a, s) for _, q, a, s in pending))
    finally:
        bar.close()


# --- output ----------------------------------------------------------------------------------


def report(opts: Options, result: RunResult) -> dict[str, Any]:
    """The JSON document of a run."""
    return {
        "modes": {m: t.report(CATEGORIES) for m, t in result.tallies.items()},
        "budget": opts.budget,
        "token_budgets": list(opts.token_budgets),
        "conversations": result.conversations,
        "questions": result.questions,
        "skipped_no_evidence": result.skipped,
        "graph": result.graph,
        "extractor": result.extractor,
        "concept_duplicates": result.concept_duplicates,
        "params": opts.params,
        "variants": opts.variants,
        "via_kafka": opts.via_kafka,
        "seconds": {k: round(v, 1) for k, v in result.seconds.items()},
        "command": opts.command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


# --- servers and wiring ----------------------------------------------------------------------


@contextlib.contextmanager
def _servers(run_id: str) -> Any:
    """``(redis_url, kafka_bootstrap, owned)``: the environment's, or an embedded stack."""
    if os.environ.get("GAAMA_REDIS_URL"):
        yield None, None, False
        return
    from gaama import devstack

    with tempfile.TemporaryDirectory(prefix=f"gaama-locomo-{run_id}-") as d:
        stack = devstack.start_stack(Path(d), devstack.free_port(), devstack.free_port())
        try:
            yield stack.redis_url, stack.kafka_bootstrap, True
        finally:
            stack.stop()


@contextlib.asynccontextmanager
async def open_stores(settings: Settings) -> AsyncIterator[Stores]:

    client = connect(settings.redis_url, cluster=settings.redis_cluster)
    keys = Keys(settings.key_prefix)
    embedder = build_embedder(settings)
    index = VectorIndex(client, settings.index_name, embedder.dim, keys)
    try:
        await index.ensure()
        yield Stores(settings, GraphStore(client, keys), index, ChunkStore(client, keys), embedder)
    finally:
        await client.aclose()


async def _main_async(
    opts: Options,
    settings: Settings,
    conversations: list[Conversation],
    tenants: dict[str, str],
    owned: bool,
    own_namespace: bool,
) -> dict[str, Any]:
    llm_client: Any = None
    async with open_stores(settings) as stores:
        procs: list[ServiceProcess] = []
        try:
            recording: RecordingExtractor | None = None
            if opts.via_kafka:
                start = owned if opts.start_services is None else opts.start_services
                if start:
                    procs = await start_services(settings)
            else:
                inner, llm_client = build_extractor(settings)
                recording = RecordingExtractor(inner)
            judge = None
            if settings.llm_enabled:
                from gaama.llm.client import LLMClient
                from gaama.llm.extractor import LLMExtractor

                if llm_client is None:
                    llm_client = LLMClient(settings)
                judge = LLMExtractor(llm_client)
            result = await run(opts, stores, conversations, tenants, recording, judge)
        finally:
            for p in procs:
                p.stop()
            if llm_client is not None:
                await llm_client.aclose()
            if not owned:  # someone else's Redis: leave nothing behind
                await _clean_up(stores, tenants, own_namespace)
    if opts.ranks_path:
        _write_ranks(opts.ranks_path, result.ranks)
    return report(opts, result)


async def _clean_up(stores: Stores, tenants: dict[str, str], own_namespace: bool) -> None:
    """Delete the run's data: its whole key prefix and index when they are the run's own, else
    (services running in a shared namespace) just its tenants."""
    if not own_namespace:
        for tenant in tenants.values():
            await stores.graph.delete_tenant(tenant)
        return
    await stores.index.drop()
    await BulkLoader(stores.graph).delete_namespace()


def main(opts: Options) -> dict[str, Any]:
    """Run the benchmark; print the table; write JSON and docs when asked. Returns the report."""
    conversations = load_locomo(opts.data, opts.conversations)
    unknown = sorted(set(opts.modes) - set(MODES))
    if unknown:
        raise ValidationError(
            f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}"
        )
    run_id = uuid.uuid4().hex[:8]
    with _servers(run_id) as (redis_url, bootstrap, owned):
        overrides: dict[str, Any] = {}
        if owned:
            overrides = {"redis_url": redis_url, "kafka_bootstrap": bootstrap}
        external_services = opts.via_kafka and not owned and not opts.start_services
        if not external_services:
            # Our own namespace: keys, index and topics no other run shares.
            overrides |= {
                "key_prefix": f"locomo-{run_id}",
                "index_name": f"locomo-{run_id}-idx",
                "topic_prefix": f"locomo-{run_id}.",
            }
        settings = load_settings(**overrides)
        # Services we do not start use their own namespace; keep our tenants apart in it.
        tenants = {
            c.sample_id: (f"{c.sample_id}-{run_id}" if external_services else c.sample_id)
            for c in conversations
        }
        doc = asyncio.run(
            _main_async(opts, settings, conversations, tenants, owned, not external_services)
        )
    table = markdown_table(doc)
    print(table)
    print(
        f"\n{doc['questions']} questions ({doc['skipped_no_evidence']} skipped: no usable "
        f"evidence); graph {json.dumps(doc['graph'])}; {doc['seconds']} s",
        file=sys.stderr,
    )
    if opts.json_path:
        opts.json_path.parent.mkdir(parents=True, exist_ok=True)
        opts.json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if opts.write_docs:
        write_docs(opts.write_docs, docs_section(doc))
    return doc


def _write_ranks(path: Path, ranks: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ranks, indent=1) + "\n", encoding="utf-8")


# --- command line ----------------------------------------------------------------------------


def _param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def _variant(text: str) -> tuple[str, dict[str, Any]]:
    name, sep, value = text.partition("=")
    try:
        overrides = json.loads(value) if sep else None
    except json.JSONDecodeError:
        overrides = None
    if not name.strip() or not isinstance(overrides, dict):
        raise argparse.ArgumentTypeError(f'expected NAME={{"setting": value, ...}}, got {text!r}')
    return name.strip(), overrides


_TOKEN_BUDGETS_ARG = ",".join(map(str, TOKEN_BUDGETS))


def _token_budgets(text: str) -> tuple[int, ...]:
    try:
        budgets = tuple(int(b) for b in text.split(",") if b.strip())
    except ValueError:
        raise ConfigError(f"--token-budgets: integers, comma-separated; got {text!r}") from None
    if any(not 10 <= b <= 20000 for b in budgets):
        raise ConfigError(f"--token-budgets: each within 10..20000; got {text!r}")
    return budgets


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run (rebuilt from the parsed arguments)."""
    argv = ["python", "-m", "benchmarks", "locomo", "--data", args.data]
    if args.conversations:
        argv += ["--conversations", args.conversations]
    if args.modes != ",".join(MODES):
        argv += ["--modes", args.modes]
    if args.budget != 1000:
        argv += ["--budget", str(args.budget)]
    if args.token_budgets != _TOKEN_BUDGETS_ARG:
        argv += ["--token-budgets", args.token_budgets]
    if args.via_kafka:
        argv.append("--via-kafka")
    for key, value in args.param or []:
        argv += ["--param", f"{key}={json.dumps(value)}"]
    for name, value in args.variant or []:
        argv += ["--variant", f"{name}={json.dumps(value, separators=(',', ':'))}"]
    if args.json:
        argv += ["--json", args.json]
    if args.ranks:
        argv += ["--ranks", args.ranks]
    if args.write_docs:
        argv.append("--write-docs")
    return shlex.join(argv)


def _cli(args: argparse.Namespace) -> int:
    try:
        token_budgets = _token_budgets(args.token_budgets)
    except ConfigError as exc:
        print(f"python -m benchmarks locomo: {exc}", file=sys.stderr)
        return 2
    opts = Options(
        data=Path(args.data),
        conversations=[c.strip() for c in args.conversations.split(",") if c.strip()]
        if args.conversations
        else None,
        modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()),
        budget=args.budget,
        token_budgets=token_budgets,
        via_kafka=args.via_kafka,
        start_services=args.start_services,
        json_path=Path(args.json) if args.json else None,
        write_docs=Path(args.docs) if args.write_docs else None,
        params=dict(args.param or []),
        variants=dict(args.variant or []),
        progress=not args.no_progress,
        command=command_line(args),
        ranks_path=Path(args.ranks) if args.ranks else None,
    )
    try:
        main(opts)
    except ConfigError as exc:
        print(f"python -m benchmarks locomo: {exc}", file=sys.stderr)
        return 2
    return 0


def register(sub: SubParsers) -> None:
    """Add the ``locomo`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "locomo",
        help="LoCoMo evidence recall of flat RAG, semantic, GAAMA and entity-PPR",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, help="LoCoMo JSON (locomo10.json format)")
    p.add_argument("--conversations", default=None, help="sample ids, comma-separated (all)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated of {MODES}")
    p.add_argument("--budget", type=int, default=1000, help="word budget of packed memory")
    p.add_argument(
        "--token-budgets",
        default=_TOKEN_BUDGETS_ARG,
        help="token budgets the memory is also packed within, comma-separated ('': none)",
    )
    p.add_argument(
        "--via-kafka",
        action="store_true",
        help="post turns through the broker to the ingest/extract/reflect services",
    )
    p.add_argument(
        "--start-services",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --via-kafka, start the services as subprocesses (default: when "
        "the harness starts its own stack)",
    )
    p.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON")
    p.add_argument(
        "--ranks",
        default=None,
        metavar="PATH",
        help="write each question's evidence ranks (1-20 or null) and memory coverage per mode",
    )
    p.add_argument(
        "--write-docs", action="store_true", help="update the LoCoMo section of docs/performance.md"
    )
    p.add_argument("--docs", default="docs/performance.md", help=argparse.SUPPRESS)
    p.add_argument(
        "--param",
        action="append",
        type=_param,
        metavar="NAME=VALUE",
        help="retrieval setting override for semantic/gaama (repeatable)",
    )
    p.add_argument(
        "--variant",
        action="append",
        type=_variant,
        metavar='NAME={"SETTING":VALUE,...}',
        help="also ask semantic and gaama with these retrieval overrides on the same graph "
        "(rows labelled MODE:NAME; repeatable)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cli)
