"""``python -m benchmarks embed``: the embedding backends side by side, in one process and one run.

For each backend (``onnx``: the default, ONNX Runtime fp32 on one thread; ``onnx-2t``: the same
on two spinning threads; ``onnx-int8``: the same graph with int8 weights; ``torch``:
sentence-transformers on torch, two threads, the ``torch`` extra): batch throughput
(``--texts`` synthetic turns encoded in batches of ``GAAMA_EMBED_BATCH``, texts/s) and the
latency of one query encode (``--queries`` short questions one at a time, p50 ms), after a
warm-up. Then 16 concurrent callers each encoding one query at a time, through
:class:`gaama.coalesce.CoalescingEmbedder` and without it (queries/s): what the query service's
micro-batching buys at c=16. Needs no Redis or broker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks import backends
from benchmarks.query import machine_info, percentile, write_section
from benchmarks.synthetic import query_texts, turn_texts
from gaama.coalesce import CoalescingEmbedder
from gaama.config import load_settings
from gaama.embed import Embedder, build_embedder
from gaama.errors import ConfigError

if TYPE_CHECKING:
    from benchmarks import SubParsers

DOCS_BEGIN, DOCS_END = "<!-- embed:begin -->", "<!-- embed:end -->"
BACKENDS = tuple(backends.SETTINGS)
CONCURRENCY = 16
COALESCE_MS = 2.0


@dataclass(slots=True)
class Options:
    backends: tuple[str, ...] = tuple(BACKENDS)
    texts: int = 1024
    queries: int = 200
    rounds: int = 2  # runs of every backend, in the order A B … B A
    json_path: Path | None = Path("bench-results/embed.json")
    docs: Path | None = None
    command: str = ""


def _sync(e: Embedder) -> Callable[[list[str]], Any]:
    fn: Callable[[list[str]], Any] = getattr(e, "embed_sync")  # noqa: B009 - local backends only
    return fn


async def _concurrent(e: Embedder, queries: list[str], rounds: int) -> float:
    """Queries/s with ``CONCURRENCY`` callers, each encoding one query at a time."""

    async def caller(k: int) -> None:
        for r in range(rounds):
            await e.embed([queries[(k * rounds + r) % len(queries)]])

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(CONCURRENCY)))
    return CONCURRENCY * rounds / (time.perf_counter() - t0)


def measure(name: str, opts: Options) -> dict[str, Any]:
    settings = load_settings(**backends.settings(name))
    e = build_embedder(settings)
    encode = _sync(e)
    texts, queries = turn_texts(opts.texts), query_texts(max(opts.queries, 64))
    t0 = time.perf_counter()
    encode(["warm up"])
    load_s = time.perf_counter() - t0
    encode(texts[: settings.embed_batch])  # first full batch: allocations, thread pools
    for q in queries[:10]:
        encode([q])
    t0 = time.perf_counter()
    encode(texts)
    batch_s = time.perf_counter() - t0
    lat = []
    for q in queries[: opts.queries]:
        t0 = time.perf_counter()
        encode([q])
        lat.append((time.perf_counter() - t0) * 1000.0)
    rounds = max(1, opts.queries // CONCURRENCY)
    serial = asyncio.run(_concurrent(e, queries, rounds))
    coalescing = CoalescingEmbedder(e, COALESCE_MS / 1000.0, settings.embed_batch)
    coalesced = asyncio.run(_concurrent(coalescing, queries, rounds))
    sizes = list(coalescing.batches)
    return {
        "batch_texts_per_s": round(len(texts) / batch_s, 1),
        "query_p50_ms": round(percentile(lat, 50), 2),
        "query_p90_ms": round(percentile(lat, 90), 2),
        "c16_queries_per_s": round(serial, 1),
        "c16_coalesced_queries_per_s": round(coalesced, 1),
        "c16_coalesced_mean_batch": round(sum(sizes) / len(sizes), 1) if sizes else 0.0,
        "load_s": round(load_s, 2),
    }


def main(opts: Options) -> dict[str, Any]:
    done: dict[str, list[dict[str, Any]]] = {name: [] for name in opts.backends}
    # A B … B A: drift of a shared machine falls on every backend alike.
    for r in range(opts.rounds):
        for name in opts.backends if r % 2 == 0 else reversed(opts.backends):
            print(f"embed: {name} (round {r + 1}) …", file=sys.stderr)
            done[name].append(measure(name, opts))
    # Each figure is the median of a backend's rounds; load_s is its first load (the model's).
    results = {
        name: {
            k: rs[0][k] if k == "load_s" else round(float(np.median([x[k] for x in rs])), 2)
            for k in rs[0]
        }
        for name, rs in done.items()
    }
    default = backends.DEFAULT if backends.DEFAULT in results else opts.backends[0]
    doc: dict[str, Any] = {
        "backends": results,
        "default": default,
        "texts": opts.texts,
        "queries": opts.queries,
        "concurrency": CONCURRENCY,
        "coalesce_ms": COALESCE_MS,
        "rounds": opts.rounds,
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
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
    print(json.dumps(results, indent=2))
    return doc


def docs_section(doc: dict[str, Any]) -> str:
    m, b = doc["machine"], doc["backends"]
    ref = b.get("torch")
    rows = []
    for name, r in b.items():
        vs = (
            f"{r['batch_texts_per_s'] / ref['batch_texts_per_s']:.2f}× / "
            f"{r['query_p50_ms'] / ref['query_p50_ms']:.2f}×"
            if ref
            else "–"
        )
        rows.append(
            f"| {'**' + name + '**' if name == doc['default'] else name} | "
            f"{r['batch_texts_per_s']:.0f} | {r['query_p50_ms']:.1f} | {r['query_p90_ms']:.1f} | "
            f"{r['c16_queries_per_s']:.0f} | {r['c16_coalesced_queries_per_s']:.0f} "
            f"({r['c16_coalesced_mean_batch']:.1f}) | {vs} |"
        )
    return "\n".join(
        [
            "## Embedding backends",
            "",
            f"Run on {doc['date']} with `{doc['command']}` ({m['cpus']} CPUs, {m['cpu']}), all "
            f"backends in one process, in {doc.get('rounds', 1)} round(s) in the order A B … B A "
            "(each figure the median of a backend's rounds): "
            f"{doc['texts']:,} synthetic turns encoded in batches of 64 (texts/s); "
            f"{doc['queries']} short questions encoded one at a time (p50/p90 ms); "
            f"{doc['concurrency']} concurrent callers encoding one question each at a time, "
            f"alone and through the query service's micro-batching ({doc['coalesce_ms']:g} ms "
            "window; mean batch in brackets). Default in bold.",
            "",
            "| backend | batch texts/s | query p50 ms | query p90 ms | c=16 q/s | "
            "c=16 coalesced q/s (batch) | vs torch: batch / p50 |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *rows,
            *(["", *doc["notes"]] if doc.get("notes") else []),
        ]
    )


def command_line(args: argparse.Namespace) -> str:
    argv = ["python", "-m", "benchmarks", "embed"]
    if args.backends != ",".join(BACKENDS):
        argv += ["--backends", args.backends]
    if args.texts != 1024 or args.queries != 200:
        argv += ["--texts", str(args.texts), "--queries", str(args.queries)]
    if args.rounds != 2:
        argv += ["--rounds", str(args.rounds)]
    if args.write_docs:
        argv.append("--write-docs")
    return shlex.join(argv)


def _cli(args: argparse.Namespace) -> int:
    try:
        names = backends.parse(args.backends)
    except ConfigError as exc:
        print(f"python -m benchmarks embed: {exc}", file=sys.stderr)
        return 2
    if min(args.texts, args.queries, args.rounds) < 1:
        print(
            "python -m benchmarks embed: --texts, --queries and --rounds must be ≥ 1",
            file=sys.stderr,
        )
        return 2
    main(
        Options(
            backends=names,
            texts=args.texts,
            queries=args.queries,
            rounds=args.rounds,
            json_path=Path(args.json) if args.json else None,
            docs=Path(args.docs) if args.write_docs else None,
            command=command_line(args),
        )
    )
    return 0


def register(sub: SubParsers) -> None:
    """Add the ``embed`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "embed",
        help="embedding backends side by side: batch texts/s, single-query p50",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated (default all)")
    p.add_argument("--texts", type=int, default=1024, help="texts for the batch figure")
    p.add_argument("--queries", type=int, default=200, help="single-query encodes timed")
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="runs of every backend, in the order A B … B A (default 2); figures are medians",
    )
    p.add_argument("--json", default="bench-results/embed.json", metavar="PATH")
    p.add_argument(
        "--write-docs", action="store_true", help="update the embed section of docs/performance.md"
    )
    p.add_argument("--docs", default="docs/performance.md", help=argparse.SUPPRESS)
    p.set_defaults(func=_cli)
