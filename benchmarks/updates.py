"""``python -m benchmarks updates``: does search return what is true now?

Generates the cases of :mod:`benchmarks.updates_cases` (deterministic from ``--seed``), ingests
each as its own tenant through the services' write path in this process
(:func:`benchmarks.locomo.ingest_in_process`, a real Redis), asks its questions and reports, per
kind:

- ``current@1``: the first ranked item naming the attribute's old or new value names the current
  one;
- ``stale_above``: the share of cases with a stale value ranked above the current one;
- ``as_of@1``: the first ranked item naming either value names the one an as-of question needs,
  asked with search's ``as_of`` set between the old value and the new one;
- ``leak``: the share of forget cases with the forgotten value in any returned item;
- ``kept``: the share of cases whose unchanged attribute is still among the ranked items.

``--extractor llm`` extracts through the fake OpenAI server (``tests/fakes/openai_server.py``)
answering with the model outputs written down in ``benchmarks/data/updates/llm_facts.json``.
``--oracle-rules`` also reports each figure with the offline update rules
(:mod:`gaama.extract.updates`) applied after extraction as a filter over the results: items whose
fact a later fact ends are moved below the rest, items carrying a forgotten value are dropped.
Without ``GAAMA_REDIS_URL`` a Redis is started for the run and stopped after it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from benchmarks.inprocess import run as run_with_redis
from benchmarks.locomo import RecordingExtractor, Stores, ingest_in_process, open_stores
from benchmarks.updates_cases import KINDS, Case, generate, load_fixture
from gaama.config import load_settings
from gaama.events import FactsExtracted
from gaama.extract.factory import build_extractor
from gaama.extract.pipeline import ExtractDeps, ExtractionPipeline
from gaama.extract.reflection import ReflectDeps, ReflectionPipeline
from gaama.extract.updates import (
    CurrentFact,
    NewFact,
    Retraction,
    ends,
    retracted,
    retraction_request,
)
from gaama.model import EdgeKind, NodeKind
from gaama.retrieval.pack import Item
from gaama.retrieval.search import Retriever
from gaama.store.bulk import BulkLoader
from gaama.store.codecs import as_text, episode_said

if TYPE_CHECKING:
    from benchmarks import SubParsers

K = 10
FIGURES = ("current@1", "stale_above", "as_of@1", "leak", "kept")


@dataclass(slots=True)
class Options:
    seed: int = 36
    per_kind: int = 4
    kinds: tuple[str, ...] = KINDS
    max_gap_turns: int = 24
    max_gap_days: int = 40
    extractor: str = "offline"
    mode: str = "gaama"
    oracle_rules: bool = False
    json_path: Path | None = None
    progress: bool = True
    command: str = ""


class RecordingReflection(ReflectionPipeline):
    """The reflection stage, keeping each tenant's fact ids in the order extraction made them."""

    def __init__(self, deps: ReflectDeps) -> None:
        super().__init__(deps)
        self.fact_ids: dict[str, list[str]] = {}

    async def on_facts(self, ev: FactsExtracted) -> list[str]:
        ids = self.fact_ids.setdefault(ev.tenant, [])
        ids.extend(i for i in ev.fact_ids if i not in ids)
        return await super().on_facts(ev)


# --- the oracle: the update rules as a filter over results -----------------------------------


@dataclass(slots=True)
class Verdicts:
    """What the rules say of one tenant's nodes: ended ones, and ones to drop (forgotten)."""

    ended: set[str] = field(default_factory=set)
    dropped: set[str] = field(default_factory=set)


async def rule_verdicts(
    stores: Stores, tenant: str, conversation: str, fact_ids: Sequence[str]
) -> Verdicts:
    """Apply the offline update rules to a tenant's facts in the order they became true."""
    graph = stores.graph
    nodes = await graph.get_nodes(tenant, list(fact_ids))
    adjacency = await graph.neighbours(tenant, list(fact_ids))
    sources = {
        f: {n.node for n in adjacency.get(f, []) if n.kind is EdgeKind.DERIVED_FROM and n.outgoing}
        for f in fact_ids
    }
    episodes = await graph.chain(tenant, conversation)
    rows = await graph.get_fields(tenant, episodes, ["raw", "text", "speaker", "time"])
    facts = sorted(
        (nodes[f] for f in fact_ids if f in nodes), key=lambda n: (n.time, fact_ids.index(n.id))
    )
    out = Verdicts()
    requests: dict[str, tuple[Retraction, str, float]] = {}
    for ep in episodes:
        raw, text, speaker, when = (as_text(b) for b in rows.get(ep, [None] * 4))
        if (req := retraction_request(episode_said(raw, text, speaker))) is not None:
            requests[ep] = (req, speaker, float(when or 0.0))
    # A request to forget is not itself a fact: what it made is dropped.
    out.dropped |= {f for f, src in sources.items() if src and src <= set(requests)}
    current: dict[str, list[CurrentFact]] = {}
    for node in facts:
        if node.id in out.dropped:
            continue
        mine = current.setdefault(node.subject, [])
        for ending in ends(NewFact(node.text, node.subject, node.time), mine):
            out.ended.add(ending.fact_id)
        mine[:] = [f for f in mine if f.id not in out.ended]
        mine.append(CurrentFact(node.id, node.text, node.time))
    for req, speaker, t in requests.values():
        mine = [f for f in current.get(speaker, []) if f.id not in out.ended]
        for ending in retracted(req, speaker, mine, t):
            out.ended.add(ending.fact_id)
            if req.redact:
                out.dropped.add(ending.fact_id)
                out.dropped |= sources.get(ending.fact_id, set())
    # An episode all of whose facts ended says only what is no longer true.
    made: dict[str, set[str]] = {}
    for f, src in sources.items():
        for ep in src:
            made.setdefault(ep, set()).add(f)
    out.ended |= {ep for ep, fs in made.items() if fs <= out.ended}
    return out


def apply_verdicts(items: list[Item], verdicts: Verdicts) -> list[Item]:
    """Forgotten items out; ended ones after the rest, each group in its order."""
    kept = [i for i in items if i.id not in verdicts.dropped and not _from_dropped(i, verdicts)]
    return [i for i in kept if i.id not in verdicts.ended] + [
        i for i in kept if i.id in verdicts.ended
    ]


def _from_dropped(item: Item, verdicts: Verdicts) -> bool:
    return (
        item.kind is NodeKind.FACT
        and bool(item.sources)
        and set(item.sources) <= (verdicts.dropped)
    )


# --- scoring ---------------------------------------------------------------------------------


def _has(text: str, needles: Sequence[str]) -> bool:
    """Whether ``text`` holds one of ``needles``, each starting at a word's start (a needle
    opening with a space or a sign starts where it says)."""
    low = text.lower()
    return any(re.search(_needle(n.lower()), low) for n in needles if n)


def _needle(needle: str) -> str:
    edge = r"(?<!\w)" if needle[:1].isalnum() else ""
    return edge + re.escape(needle)


def first_named(items: Sequence[Item], first: Sequence[str], second: Sequence[str]) -> str:
    """``"first"``/``"second"``: which list the first item naming either names (``first`` wins
    a tie); ``""`` when none does."""
    for item in items:
        if _has(item.text, first):
            return "first"
        if _has(item.text, second):
            return "second"
    return ""


@dataclass(slots=True)
class Score:
    current: bool | None = None
    stale_above: bool | None = None
    as_of: bool | None = None
    leak: bool | None = None
    kept: bool | None = None


async def score_case(
    case: Case, retriever: Retriever, mode: str, verdicts: Verdicts | None
) -> Score:
    async def ask(question: str, as_of: float | None = None) -> list[Item]:
        res = await retriever.search(
            case.id,
            question,
            mode=mode,  # type: ignore[arg-type]
            k=K,
            as_of=as_of,
        )
        ranked = list(res.ranked)
        extra = [m for m in res.memory if m.id not in {r.id for r in ranked}]
        items = ranked + extra
        return apply_verdicts(items, verdicts) if verdicts is not None else items

    s = Score()
    items = await ask(case.question)
    if case.retracted:
        s.leak = any(_has(i.text, case.retracted) for i in items)
    else:
        which = first_named(items[:K], case.current, case.stale)
        s.current = which == "first"
        stale_at = next((n for n, i in enumerate(items[:K]) if _stale(i, case)), None)
        current_at = next((n for n, i in enumerate(items[:K]) if _has(i.text, case.current)), None)
        s.stale_above = stale_at is not None and (current_at is None or stale_at < current_at)
    if case.as_of_question:
        past = await ask(case.as_of_question, case.as_of)
        s.as_of = first_named(past[:K], case.stale, case.current) == "first"
    if case.kept:
        s.kept = any(_has(i.text, (case.kept,)) for i in (await ask(case.kept_question))[:K])
    return s


def _stale(item: Item, case: Case) -> bool:
    return _has(item.text, case.stale) and not _has(item.text, case.current)


def tabulate(cases: Sequence[Case], scores: Sequence[Score]) -> dict[str, dict[str, Any]]:
    """Per kind and over all: each figure's share (None where no case of the kind has it)."""
    groups: dict[str, list[Score]] = {}
    for case, score in zip(cases, scores, strict=True):
        groups.setdefault(case.kind, []).append(score)
        groups.setdefault("all", []).append(score)
    out: dict[str, dict[str, Any]] = {}
    for kind, ss in groups.items():
        row: dict[str, Any] = {"cases": len(ss)}
        for name, attr in zip(
            FIGURES, ("current", "stale_above", "as_of", "leak", "kept"), strict=True
        ):
            values = [getattr(x, attr) for x in ss if getattr(x, attr) is not None]
            row[name] = round(sum(values) / len(values), 3) if values else None
        out[kind] = row
    return out


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The printed table: a row per kind, each figure per variant ("today" / "rules")."""
    variants = list(results)
    head = ["kind", "n"] + [f"{f} {v}" for f in FIGURES for v in variants]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    first = results[variants[0]]
    for kind in [*(k for k in KINDS if k in first), "all"]:
        cells = [kind, str(first[kind]["cases"])]
        for f in FIGURES:
            for v in variants:
                x = results[v][kind][f]
                cells.append("–" if x is None else f"{x:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- the LLM path ----------------------------------------------------------------------------

_CONTEXT_HEADING = "OLDER MEMORY"
_CHUNK_EP = re.compile(r"^- episode_id: (\S+)\n  text: \[[^\]]*\]\s*(?P<who>[^:]+):\s*(.*)$", re.M)


class FixtureModel:
    """Answers extraction prompts with the written-down model outputs for each turn's template
    (other prompts: the fake server's default responder)."""

    def __init__(self, cases: Sequence[Case]) -> None:
        self.fixture = load_fixture()
        self.rendered: dict[str, tuple[str, dict[str, str]]] = {}
        for case in cases:
            self.rendered.update(case.rendered)
        self.unknown: list[str] = []

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        from tests.fakes.openai_server import default_responder

        fmt = (request.get("response_format") or {}).get("json_schema") or {}
        if fmt.get("name") != "gaama_extraction":
            return default_responder(request)
        user = str(request["messages"][-1]["content"])
        user = user.split(_CONTEXT_HEADING, 1)[0]  # the chunk comes before the older context
        facts, episodes = [], []
        for ep_id, who, said in _CHUNK_EP.findall(user):
            found = self.rendered.get(said.strip())
            if found is None:
                self.unknown.append(said)
                continue
            template, slots = found
            concepts: list[str] = []
            for fact in self.fixture[template]:
                values = slots | {"speaker": who.strip()}
                labels = [str(c).format(**values) for c in fact.get("concepts", [])]  # type: ignore[attr-defined]
                concepts += labels
                facts.append(
                    {
                        "text": str(fact["text"]).format(**values),
                        "belief": 0.95,
                        "source_episode_ids": [ep_id],
                        "subject": who.strip(),
                        "concepts": labels,
                    }
                )
            episodes.append({"episode_id": ep_id, "concepts": concepts[:3] or ["small_talk"]})
        return {"facts": facts, "episodes": episodes}


@contextlib.contextmanager
def _model(opts: Options, cases: Sequence[Case]) -> Iterator[dict[str, Any]]:
    """Settings overrides for the chosen extractor (the fake server, for ``llm``)."""
    if opts.extractor == "offline":
        yield {}
        return
    from tests.fakes.openai_server import FakeOpenAIServer

    model = FixtureModel(cases)
    with FakeOpenAIServer(model) as server:
        yield {
            "llm_base_url": server.base_url,
            "llm_model": "fixture-model",
            "llm_api_key": "fixture",
        }
    if model.unknown:
        raise RuntimeError(f"turns with no fixture answer: {model.unknown[:3]}")


# --- the run ---------------------------------------------------------------------------------


async def measure(
    opts: Options, cases: list[Case], url: str, llm: dict[str, Any]
) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    settings = load_settings(
        redis_url=url, key_prefix=f"updates-{run_id}", index_name=f"updates-{run_id}-idx", **llm
    )
    seconds: dict[str, float] = {}
    async with open_stores(settings) as stores:
        inner, client = build_extractor(settings)
        extractor = RecordingExtractor(inner)
        try:
            t0 = time.perf_counter()
            extract = ExtractionPipeline(
                ExtractDeps(
                    settings, stores.graph, stores.index, stores.chunks, stores.embedder, extractor
                )
            )
            reflect = RecordingReflection(
                ReflectDeps(settings, stores.graph, stores.index, stores.embedder, extractor)
            )
            total = sum(c.conversation.n_turns for c in cases)
            with tqdm(
                total=total, desc="ingest", disable=not opts.progress, file=sys.stderr
            ) as bar:
                for case in cases:
                    await ingest_in_process(
                        case.conversation, case.id, stores, extract, reflect, bar
                    )
            seconds["ingest"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            retriever = Retriever(stores.graph, stores.index, stores.embedder, settings)
            results: dict[str, dict[str, dict[str, Any]]] = {}
            variants = {"today": False, "rules": True} if opts.oracle_rules else {"today": False}
            for name, with_rules in variants.items():
                scores = []
                for case in cases:
                    verdicts = None
                    if with_rules:
                        verdicts = await rule_verdicts(
                            stores, case.id, case.id, reflect.fact_ids.get(case.id, [])
                        )
                    scores.append(await score_case(case, retriever, opts.mode, verdicts))
                results[name] = tabulate(cases, scores)
            seconds["questions"] = time.perf_counter() - t1
        finally:
            if client is not None:
                await client.aclose()
            await stores.index.drop()
            await BulkLoader(stores.graph).delete_namespace()
    return {
        "results": results,
        "extractor": extractor.name,
        "mode": opts.mode,
        "seed": opts.seed,
        "per_kind": opts.per_kind,
        "kinds": list(opts.kinds),
        "max_gap_turns": opts.max_gap_turns,
        "max_gap_days": opts.max_gap_days,
        "cases": len(cases),
        "turns": sum(c.conversation.n_turns for c in cases),
        "k": K,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "command": opts.command,
    }


def main(opts: Options) -> dict[str, Any]:
    """Generate, ingest, ask, score; print the table; write the JSON when asked."""
    cases = generate(opts.seed, opts.per_kind, opts.kinds, opts.max_gap_turns, opts.max_gap_days)
    doc: dict[str, Any] = {}

    with _model(opts, cases) as llm:

        async def run(url: str) -> None:
            doc.update(await measure(opts, cases, url, llm))

        run_with_redis(run, os.environ.get("GAAMA_REDIS_URL"))
    print(table(doc["results"]))
    print(
        f"\n{doc['cases']} cases, {doc['turns']} turns, extractor {doc['extractor']}, mode "
        f"{doc['mode']}; {doc['seconds']} s",
        file=sys.stderr,
    )
    if opts.json_path:
        opts.json_path.parent.mkdir(parents=True, exist_ok=True)
        opts.json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


def _cli(args: argparse.Namespace) -> int:
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    opts = Options(
        seed=args.seed,
        per_kind=args.per_kind,
        kinds=kinds,
        max_gap_turns=args.max_gap_turns,
        max_gap_days=args.max_gap_days,
        extractor=args.extractor,
        mode=args.mode,
        oracle_rules=args.oracle_rules,
        json_path=Path(args.json) if args.json else None,
        progress=not args.no_progress,
        command=shlex.join(["python", "-m", "benchmarks", "updates", *sys.argv[2:]]),
    )
    try:
        main(opts)
    except ValueError as exc:
        print(f"python -m benchmarks updates: {exc}", file=sys.stderr)
        return 2
    return 0


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def register(sub: SubParsers) -> None:
    """Add the ``updates`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "updates",
        help="knowledge that changes: current value, stale above current, as-of, retraction",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seed", type=int, default=36, help="the cases' seed")
    p.add_argument("--per-kind", type=_positive, default=4, help="cases of each kind")
    p.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated of " + ", ".join(KINDS)
    )
    p.add_argument("--max-gap-turns", type=_positive, default=24, help="most turns old→new")
    p.add_argument("--max-gap-days", type=_positive, default=40, help="most days old→new")
    p.add_argument(
        "--extractor",
        choices=("offline", "llm"),
        default="offline",
        help="llm: the fake OpenAI server answering with the written-down fixtures",
    )
    p.add_argument("--mode", choices=("gaama", "semantic"), default="gaama")
    p.add_argument(
        "--oracle-rules",
        action="store_true",
        help="also score with the offline update rules applied to the results",
    )
    p.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="write the results as JSON (bench-results/updates.json)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cli)
