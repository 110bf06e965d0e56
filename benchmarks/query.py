"""``python -m benchmarks query``: query latency and throughput over synthetic tenants of
10k–1M nodes.

Each size is its own tenant in one Redis, loaded in pipelined batches through the store's bulk
loader (node hashes carrying their vectors, adjacency both ways, NEXT chains; see
:mod:`benchmarks.synthetic` and :class:`gaama.store.bulk.BulkLoader`). The real query service
then runs as a subprocess (``python -m services.query.main``, one API key per tenant) and is
asked over HTTP at concurrency 1 and 16 in each mode. The query text is embedded by the service
with the real MiniLM, so embedding time is real; the stored vectors are synthetic, so similarity
ranks are meaningless, which does not matter for latency.

Without ``--redis-url`` (or ``GAAMA_REDIS_URL``) the command starts its own embedded stack in a
temporary directory and stops it at the end; either way keys and index carry a run prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from redis.exceptions import RedisError
from redisvl.exceptions import RedisSearchError
from tqdm import tqdm

from benchmarks import backends
from benchmarks.synthetic import Batch, SyntheticGraph, query_texts
from gaama.config import ApiKey, hash_api_key, load_settings
from gaama.errors import ConfigError
from gaama.launch import ServiceProcess
from gaama.store import cluster, connect
from gaama.store.bulk import BulkLoader
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from benchmarks import SubParsers

DOCS_BEGIN, DOCS_END = "<!-- query:begin -->", "<!-- query:end -->"
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
ROUNDS = 4  # interleaved rounds per concurrency: every mode runs in each (see compare_modes)
STAGES = ("embed", "knn", "expand", "ppr", "pack")
MAX_LOAD_MINUTES = 20.0
IN_FLIGHT = 2  # pipelines in flight while loading: Python builds one while Redis indexes another


# --- helpers shared with benchmarks.ingest ----------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_gb = round(int(first.split()[1]) / 1024 / 1024, 1)
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def publish(
    doc: dict[str, Any], json_path: Path, section: str, docs: Path | None, markers: tuple[str, str]
) -> None:
    """Write ``doc`` as JSON to ``json_path``, print ``section`` and, with ``docs``, put it
    between ``markers`` there."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(section)
    if docs is not None:
        write_section(docs, *markers, section)


def write_section(path: Path, begin: str, end: str, section: str) -> None:
    """Replace the text between ``begin`` and ``end`` in ``path`` (append when absent); other
    sections of the file are left as they are."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    block = f"{begin}\n{section.strip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def servers(
    redis_url: str | None, kafka_bootstrap: str | None, need_kafka: bool = False
) -> Iterator[tuple[str, str]]:
    """``(redis_url, kafka_bootstrap)``: the given servers, or an embedded stack started here on
    free ports in a temporary directory and stopped on exit."""
    if redis_url and (kafka_bootstrap or not need_kafka):
        yield redis_url, kafka_bootstrap or ""
        return
    from gaama import devstack

    with tempfile.TemporaryDirectory(prefix="gaama-bench-") as d:
        stack = devstack.start_stack(Path(d), devstack.free_port(), devstack.free_port())
        try:
            yield stack.redis_url, stack.kafka_bootstrap
        finally:
            stack.stop()


# --- loading ----------------------------------------------------------------------------------


async def used_memory(redis: aioredis.Redis) -> int:
    if cluster.is_cluster(redis):  # every primary's
        await cluster.initialized(redis)
        infos = [await cluster.on_node(n, ["INFO", "memory"]) for n in cluster.primaries(redis)]
        return sum(_used_memory(reply) for (reply,) in infos)
    info = await redis.info("memory")
    return int(info["used_memory"])


def _used_memory(reply: Any) -> int:
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return next(
        int(line.split(":")[1]) for line in text.splitlines() if line.startswith("used_memory:")
    )


async def load_tenant(
    redis: aioredis.Redis,
    keys: Keys,
    tenant: str,
    nodes: int,
    *,
    seed: int = 0,
    progress: bool = True,
    synthetic: SyntheticGraph | None = None,
) -> dict[str, Any]:
    """Write a synthetic graph of ``nodes`` nodes for ``tenant`` (``synthetic``, or a new
    :class:`SyntheticGraph`); its timing, memory, shape.

    Each batch is one MULTI/EXEC of :meth:`BulkLoader.write_batch` (a conversation is never
    split across batches, as it requires).
    """
    loader = BulkLoader(GraphStore(redis, keys))
    synthetic = synthetic or SyntheticGraph(tenant, nodes, seed=seed)
    before = await used_memory(redis)
    started = time.perf_counter()
    pending: set[asyncio.Task[None]] = set()
    bar = tqdm(
        total=nodes, desc=f"load {nodes:,}", unit="node", disable=not progress, smoothing=0.05
    )
    for batch in synthetic.batches():
        if len(pending) >= IN_FLIGHT:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()

        async def write(b: Batch = batch) -> None:
            await loader.write_batch(tenant, b.nodes, b.vectors, b.edges, b.chain)
            bar.update(len(b.nodes))

        pending.add(asyncio.create_task(write()))
    if pending:
        await asyncio.gather(*pending)
    bar.close()
    seconds = time.perf_counter() - started
    after = await used_memory(redis)
    s = synthetic.stats
    return {
        "seconds": seconds,
        "bytes": after - before,
        "nodes_per_s": nodes / seconds,
        "graph": {
            "nodes": s.nodes,
            "edges": s.edges,
            "conversations": s.conversations,
            "concept_degree_max": s.concept_degree_max,
            "concept_degree_p50": s.concept_degree_p50,
            "concepts_over_50_edges": s.hubs_over_50,
        },
    }


# --- querying ---------------------------------------------------------------------------------


QUOTAS_OFF = {"GAAMA_TENANT_CONCURRENCY": "0", "GAAMA_TENANT_RATE": "0"}


@dataclass(slots=True)
class RunSpec:
    nodes: int
    concurrency: int
    mode: str
    requests: int


@dataclass(slots=True)
class Observed:
    latencies_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STAGES})
    errors: int = 0


async def _ask(client: Any, url: str, key: str, text: str, mode: str, out: Observed) -> None:
    t0 = time.perf_counter()
    r = await client.post(
        f"{url}/v1/search",
        json={"query": text, "mode": mode},
        headers={"Authorization": f"Bearer {key}"},
    )
    ms = (time.perf_counter() - t0) * 1000.0
    if r.status_code != 200:
        out.errors += 1
        return
    out.latencies_ms.append(ms)
    for stage, v in r.json()["stats"]["timings_ms"].items():
        if stage in out.stages:
            out.stages[stage].append(float(v))


async def run_queries(
    url: str,
    key: str,
    spec: RunSpec,
    texts: Sequence[str],
    progress: bool,
    *,
    first_text: int = 0,
    out: Observed | None = None,
) -> tuple[Observed, float]:
    """``spec.requests`` searches, ``spec.concurrency`` at a time, with the texts from
    ``first_text`` on; the observations (added to ``out`` if given) and the wall time."""
    import httpx

    out = out if out is not None else Observed()
    limits = httpx.Limits(max_connections=spec.concurrency, max_keepalive_connections=64)
    bar = tqdm(
        total=spec.requests,
        desc=f"{spec.nodes:,} {spec.mode} c={spec.concurrency}",
        unit="req",
        disable=not progress,
        leave=False,
    )
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        next_i = 0

        async def worker() -> None:
            nonlocal next_i
            while next_i < spec.requests:
                i = next_i
                next_i += 1
                text = texts[(first_text + i) % len(texts)]
                await _ask(client, url, key, text, spec.mode, out)
                bar.update(1)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
        wall = time.perf_counter() - started
    bar.close()
    return out, wall


async def compare_modes(
    urls: Mapping[str, str],
    key: str,
    nodes: int,
    concurrency: int,
    modes: Sequence[str],
    requests: int,
    texts: Sequence[str],
    progress: bool,
) -> list[dict[str, Any]]:
    """Every backend's service (``urls``: backend → URL) in every mode at one concurrency, in
    interleaved rounds (A B B A A B B A): drift of a shared machine (other jobs, CPU frequency)
    then falls on every backend and mode alike, which a ratio between them needs. Each asks the
    same texts in the same order."""
    per_round = math.ceil(requests / ROUNDS)
    variants = [(b, m) for b in urls for m in modes]
    seen = {v: Observed() for v in variants}
    walls = dict.fromkeys(variants, 0.0)
    for r in range(ROUNDS):
        for backend, mode in variants if r % 2 == 0 else list(reversed(variants)):
            spec = RunSpec(nodes, concurrency, mode, per_round)
            _, wall = await run_queries(
                urls[backend],
                key,
                spec,
                texts,
                progress,
                first_text=r * per_round,
                out=seen[backend, mode],
            )
            walls[backend, mode] += wall
    out = []
    for backend, mode in variants:
        lat = seen[backend, mode].latencies_ms
        wall = walls[backend, mode]
        out.append(
            {
                "backend": backend,
                "nodes": nodes,
                "concurrency": concurrency,
                "mode": mode,
                "requests": per_round * ROUNDS,
                "errors": seen[backend, mode].errors,
                "p50_ms": round(percentile(lat, 50), 2),
                "p95_ms": round(percentile(lat, 95), 2),
                "p99_ms": round(percentile(lat, 99), 2),
                "qps": round(len(lat) / wall, 2) if wall else 0.0,
                "stage_p50_ms": {
                    s: round(percentile(v, 50), 3) for s, v in seen[backend, mode].stages.items()
                },
            }
        )
    return out


# --- the run ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Options:
    sizes: tuple[int, ...] = DEFAULT_SIZES
    modes: tuple[str, ...] = ("gaama", "semantic")
    concurrency: tuple[int, ...] = (1, 16)
    requests: int | None = None  # None: 200 at c=1, 800 otherwise
    warmup: int = 20
    max_load_minutes: float = MAX_LOAD_MINUTES
    redis_url: str | None = None
    json_path: Path | None = Path("bench-results/query.json")
    docs: Path | None = None
    keep: bool = False
    progress: bool = True
    command: str = ""
    backends: tuple[str, ...] = (backends.DEFAULT,)  # the first one is what targets are read from
    redis_cluster: int = 1  # > 1: one server against a cluster of this many primaries
    cluster_tenants: int = 6


def _requests_for(opts: Options, concurrency: int) -> int:
    if opts.requests is not None:
        return opts.requests
    return 200 if concurrency == 1 else 800


def _extrapolate(loads: dict[int, dict[str, Any]], size: int) -> float:
    """Seconds to load ``size`` nodes, from the largest load so far. HNSW insertion grows
    ~log(n) per vector; the per-node rate is scaled by that ratio."""
    base = max(loads)
    rate = loads[base]["seconds"] / base
    return float(rate * size * np.log(size) / np.log(max(base, 2)))


async def _run(opts: Options, redis_url: str) -> dict[str, Any]:

    run_id = uuid.uuid4().hex[:6]
    prefix = f"gbench{run_id}"
    keys = Keys(prefix)
    tenants = {n: f"bench-{n}" for n in opts.sizes}
    api = {n: f"bench-key-{run_id}-{n}" for n in opts.sizes}
    settings = load_settings(
        redis_url=redis_url,
        key_prefix=prefix,
        index_name=f"{prefix}-idx",
        api_keys=[ApiKey(key_sha256=hash_api_key(api[n]), tenant=tenants[n]) for n in opts.sizes],
    )
    client = connect(redis_url, cluster=settings.redis_cluster, socket_timeout=600)
    index = VectorIndex(client, settings.index_name, settings.embed_dim, keys)
    await index.ensure()
    loads: dict[int, dict[str, Any]] = {}
    not_run: dict[str, str] = {}
    runs: list[dict[str, Any]] = []
    services: dict[str, ServiceProcess] = {}
    try:
        for n in sorted(opts.sizes):
            if loads:
                est = _extrapolate(loads, n)
                if est > opts.max_load_minutes * 60:
                    base = max(loads)
                    not_run[str(n)] = (
                        f"not run: loading would take ~{est / 60:.0f} min (extrapolated from "
                        f"{base:,} nodes in {loads[base]['seconds']:.0f} s, "
                        f"{loads[base]['nodes_per_s']:.0f} nodes/s, HNSW insert cost ~log n), "
                        f"over the {opts.max_load_minutes:.0f}-minute limit (--max-load-minutes)"
                    )
                    print(f"# {n:,} nodes {not_run[str(n)]}", file=sys.stderr)
                    continue
            loads[n] = await load_tenant(
                client, keys, tenants[n], n, seed=n, progress=opts.progress
            )
            print(
                f"# loaded {n:,} nodes in {loads[n]['seconds']:.1f} s "
                f"({loads[n]['bytes'] / n:.0f} bytes/node)",
                file=sys.stderr,
            )
        log_dir = Path(tempfile.mkdtemp(prefix="gaama-bench-query-"))
        texts = query_texts(4096)
        for backend in opts.backends:  # one service process per embedding backend, all running
            # The caller's own GAAMA_* variables reach the service (e.g. GAAMA_RETRIEVAL__* knobs
            # for an A/B), under the run's namespace; the backend's win. One tenant at a time
            # measures capacity: its per-tenant quotas are lifted. An idle service costs nothing:
            # the rounds ask one service at a time.
            env = {**backends.env(backend), **QUOTAS_OFF}
            services[backend] = await ServiceProcess(
                "query", settings, log_dir, inherit=True, extra=env
            ).astart(180)
        urls = {b: services[b].url for b in opts.backends}
        await _run_sizes(opts, urls, api, sorted(loads), texts, runs)
    finally:
        for service in services.values():
            service.stop()
        if not opts.keep:
            # Index first: deleting a million indexed hashes one by one would update the HNSW
            # graph for each (as slow as loading it); without the index it is a plain UNLINK.
            with contextlib.suppress(RedisError, RedisSearchError):  # best-effort clean-up
                await index.drop()
            graph = GraphStore(client, keys)
            for n in loads:
                await graph.delete_tenant(tenants[n])
        await client.aclose()
    return {
        "runs": runs,
        "redis_bytes_per_node": {str(n): round(v["bytes"] / n, 1) for n, v in loads.items()},
        "load_seconds": {str(n): round(v["seconds"], 2) for n, v in loads.items()},
        "load_nodes_per_s": {str(n): round(v["nodes_per_s"], 1) for n, v in loads.items()},
        "graphs": {str(n): v["graph"] for n, v in loads.items()},
        "not_run": not_run,
        "targets": targets(
            [r for r in runs if r["backend"] == opts.backends[0]], sorted(opts.sizes), not_run
        )
        + backend_targets(runs, opts.backends),
        "backends": list(opts.backends),
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
    }


async def _run_sizes(
    opts: Options,
    urls: Mapping[str, str],
    api: dict[int, str],
    sizes: Sequence[int],
    texts: Sequence[str],
    runs: list[dict[str, Any]],
) -> None:
    """Every size, concurrency and mode against the running services (one per backend, asked in
    interleaved rounds); results added to ``runs``."""
    for n in sizes:
        for url in urls.values():
            for mode in opts.modes:  # warm-up: model, connections, Redis caches
                spec = RunSpec(n, 4, mode, opts.warmup)
                await run_queries(url, api[n], spec, texts, progress=False)
        for c in opts.concurrency:
            results = await compare_modes(
                urls, api[n], n, c, opts.modes, _requests_for(opts, c), texts, opts.progress
            )
            for result in results:
                runs.append(result)
                print(
                    f"# {result['backend']:6s} {n:>9,} c={c:<3} {result['mode']:8s} "
                    f"p50 {result['p50_ms']:7.1f} ms  p99 {result['p99_ms']:7.1f} ms  "
                    f"{result['qps']:6.1f} qps  embed {result['stage_p50_ms']['embed']:6.1f} ms",
                    file=sys.stderr,
                )


def _find(runs: Sequence[dict[str, Any]], nodes: int, c: int, mode: str) -> dict[str, Any] | None:
    return next(
        (r for r in runs if (r["nodes"], r["concurrency"], r["mode"]) == (nodes, c, mode)), None
    )


def targets(
    runs: Sequence[dict[str, Any]], sizes: Sequence[int], not_run: dict[str, str]
) -> list[dict[str, Any]]:
    """The three latency targets, each with the figures it was judged on."""
    out: list[dict[str, Any]] = []
    for n in sizes:
        for c in sorted({r["concurrency"] for r in runs}):
            g, s = _find(runs, n, c, "gaama"), _find(runs, n, c, "semantic")
            if g and s:
                ratio = g["p50_ms"] / s["p50_ms"] if s["p50_ms"] else float("inf")
                out.append(
                    {
                        "target": f"gaama p50 ≤ 1.3 × semantic p50 ({n:,} nodes, c={c})",
                        "value": f"{g['p50_ms']:.1f} / {s['p50_ms']:.1f} ms = {ratio:.2f}×",
                        "holds": ratio <= 1.3,
                    }
                )
    big = 100_000
    for mode in ("gaama", "semantic"):
        r = _find(runs, big, 1, mode)
        out.append(
            {
                "target": f"p99 ≤ 100 ms at 100k nodes, c=1 ({mode})",
                "value": f"{r['p99_ms']:.1f} ms" if r else "not run",
                "holds": (r["p99_ms"] <= 100) if r else None,
            }
        )
    small, large = _find(runs, 10_000, 1, "gaama"), _find(runs, 1_000_000, 1, "gaama")
    if small and large:
        ratio = large["p50_ms"] / small["p50_ms"]
        out.append(
            {
                "target": "gaama p50 at 1M ≤ 2 × p50 at 10k (c=1)",
                "value": f"{large['p50_ms']:.1f} / {small['p50_ms']:.1f} ms = {ratio:.2f}×",
                "holds": ratio <= 2,
            }
        )
    else:
        out.append(
            {
                "target": "gaama p50 at 1M ≤ 2 × p50 at 10k (c=1)",
                "value": not_run.get("1000000", "not run"),
                "holds": None,
            }
        )
    return out


def backend_targets(runs: Sequence[dict[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """The query targets of the first backend against ``torch`` (when both ran), and its knn
    stage at 100k against 10k."""
    first = names[0]
    mine = [r for r in runs if r["backend"] == first]
    torch = [r for r in runs if r["backend"] == "torch"]
    out: list[dict[str, Any]] = []
    k10, k100 = _find(mine, 10_000, 1, "gaama"), _find(mine, 100_000, 1, "gaama")
    if k10 and k100:
        a, b = k100["stage_p50_ms"]["knn"], k10["stage_p50_ms"]["knn"]
        out.append(
            {
                "target": f"knn p50 at 100k ≤ 1.5 × at 10k (gaama, c=1, {first})",
                "value": f"{a:.1f} / {b:.1f} ms = {a / b:.2f}×",
                "holds": a <= 1.5 * b,
            }
        )
    if first == "torch" or not torch:
        return out
    sizes = sorted({r["nodes"] for r in mine})
    for n in sizes:
        for mode in ("gaama", "semantic"):
            o, t = _find(mine, n, 1, mode), _find(torch, n, 1, mode)
            if o and t:
                a, b = o["stage_p50_ms"]["embed"], t["stage_p50_ms"]["embed"]
                out.append(
                    {
                        "target": f"embed stage p50 ≤ ⅓ torch's ({n:,} nodes, c=1, {mode})",
                        "value": f"{a:.1f} / {b:.1f} ms = {a / b:.2f}×",
                        "holds": a * 3 <= b,
                    }
                )
            o, t = _find(mine, n, 16, mode), _find(torch, n, 16, mode)
            if o and t:
                a, b = o["qps"], t["qps"]
                out.append(
                    {
                        "target": f"QPS at c=16 ≥ 2 × torch's ({n:,} nodes, {mode})",
                        "value": f"{a:.1f} / {b:.1f} = {a / b:.2f}×" if b else "torch: 0",
                        "holds": a >= 2 * b,
                    }
                )
    o, t = _find(mine, 100_000, 1, "gaama"), _find(torch, 100_000, 1, "gaama")
    out.append(
        {
            "target": "gaama p50 at 100k ≤ 0.6 × torch's (c=1)",
            "value": (
                f"{o['p50_ms']:.1f} / {t['p50_ms']:.1f} ms = {o['p50_ms'] / t['p50_ms']:.2f}×"
                if o and t
                else "not run"
            ),
            "holds": (o["p50_ms"] <= 0.6 * t["p50_ms"]) if o and t else None,
        }
    )
    return out


# --- report -----------------------------------------------------------------------------------


def _mark(holds: bool | None) -> str:
    return "n/a" if holds is None else ("**holds**" if holds else "**fails**")


def docs_section(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    lines = [
        "## Query latency (synthetic tenants)",
        "",
        f"Run on {doc['date']} with `{doc['command']}` ({m['cpus']} CPUs, {m['cpu']}, "
        f"{m['memory_gb']} GB). Latency is client-side over HTTP to the real query service "
        "(one process), the query embedded by MiniLM in the service (backend in the first "
        "column; targets are read from the first backend's runs); stage columns are the "
        "service's own p50 per stage (ms). Each backend has its own service process, all "
        "running, asked one at a time: the backends and modes of one size and concurrency run "
        "in four interleaved rounds (A B B A …) so that drift of this shared machine falls on "
        "all alike. Graphs: 45 % episodes in NEXT chains, 35 % facts, "
        "10 % concepts (Pareto-tailed degree), 10 % reflections; synthetic topic-clustered "
        "vectors (see `benchmarks/synthetic.py`).",
        "",
        "| embedder | nodes | c | mode | p50 ms | p95 ms | p99 ms | QPS | embed | knn | expand "
        "| ppr | pack |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["runs"]:
        st = r["stage_p50_ms"]
        lines.append(
            f"| {r.get('backend', '')} | {r['nodes']:,} | {r['concurrency']} | {r['mode']} | "
            f"{r['p50_ms']:.1f} | "
            f"{r['p95_ms']:.1f} | {r['p99_ms']:.1f} | {r['qps']:.1f} | "
            + " | ".join(f"{st[s]:.1f}" for s in STAGES)
            + " |"
        )
    lines += [
        "",
        "| nodes | load s | nodes/s | Redis bytes/node | concept degree max / p50 | "
        "concepts > 50 edges |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n, secs in doc["load_seconds"].items():
        g = doc["graphs"][n]
        lines.append(
            f"| {int(n):,} | {secs:.0f} | {doc['load_nodes_per_s'][n]:.0f} | "
            f"{doc['redis_bytes_per_node'][n]:.0f} | {g['concept_degree_max']} / "
            f"{g['concept_degree_p50']:.0f} | {g['concepts_over_50_edges']} |"
        )
    for n, why in doc["not_run"].items():
        lines.append(f"| {int(n):,} | {why} | | | | |")
    lines += ["", "Targets:", ""]
    lines += [f"- {t['target']}: {t['value']} — {_mark(t['holds'])}" for t in doc["targets"]]
    if doc.get("notes"):
        lines += ["", *doc["notes"]]
    return "\n".join(lines)


def main(opts: Options) -> dict[str, Any]:
    if opts.redis_cluster > 1:
        from benchmarks import query_cluster

        return query_cluster.main(opts, opts.redis_cluster, opts.cluster_tenants)
    url = opts.redis_url or os.environ.get("GAAMA_REDIS_URL")
    with servers(url, None) as (redis_url, _):
        doc = asyncio.run(_run(opts, redis_url))
    if opts.json_path:
        opts.json_path.parent.mkdir(parents=True, exist_ok=True)
        if opts.json_path.exists():  # keep hand-written notes (profiling findings) across runs
            with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
                notes = json.loads(opts.json_path.read_text(encoding="utf-8")).get("notes")
                if notes:
                    doc["notes"] = notes
        opts.json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if opts.docs:
        write_section(opts.docs, DOCS_BEGIN, DOCS_END, docs_section(doc))
    return doc


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x.replace("_", "")) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run (rebuilt from the parsed arguments)."""
    argv = ["python", "-m", "benchmarks", "query", "--sizes", ",".join(map(str, args.sizes))]
    if args.modes != "gaama,semantic":
        argv += ["--modes", args.modes]
    if tuple(args.concurrency) != (1, 16):
        argv += ["--concurrency", ",".join(map(str, args.concurrency))]
    if args.requests is not None:
        argv += ["--requests", str(args.requests)]
    if args.max_load_minutes != MAX_LOAD_MINUTES:
        argv += ["--max-load-minutes", f"{args.max_load_minutes:g}"]
    if args.backends != backends.DEFAULT:
        argv += ["--backends", args.backends]
    if args.redis_cluster > 1:
        argv += ["--redis-cluster", str(args.redis_cluster), "--tenants", str(args.tenants)]
    if args.write_docs:
        argv.append("--write-docs")
    return shlex.join(argv)


def _cli(args: argparse.Namespace) -> int:
    opts = Options(
        sizes=args.sizes,
        modes=tuple(m for m in args.modes.split(",") if m),
        concurrency=args.concurrency,
        requests=args.requests,
        warmup=args.warmup,
        max_load_minutes=args.max_load_minutes,
        redis_url=args.redis_url,
        json_path=Path(args.json) if args.json else None,
        docs=Path(args.docs) if args.write_docs else None,
        keep=args.keep,
        progress=not args.no_progress,
        command=command_line(args),
        redis_cluster=args.redis_cluster,
        cluster_tenants=args.tenants,
    )
    try:
        opts.backends = backends.parse(args.backends)
        main(opts)
    except ConfigError as exc:
        print(f"python -m benchmarks query: {exc}", file=sys.stderr)
        return 2
    return 0


def register(sub: SubParsers) -> None:
    """Add the ``query`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "query",
        help="query latency/QPS over synthetic 10k–1M-node tenants",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--sizes",
        type=_ints,
        default=DEFAULT_SIZES,
        help="tenant sizes in nodes, comma-separated (default 10000,100000,1000000)",
    )
    p.add_argument("--modes", default="gaama,semantic", help="retrieval modes (gaama,semantic,ppr)")
    p.add_argument("--concurrency", type=_ints, default=(1, 16), help="default 1,16")
    p.add_argument(
        "--requests",
        type=int,
        default=None,
        help="requests per mode and concurrency, in 4 interleaved rounds (default 200 at c=1, "
        "800 otherwise)",
    )
    p.add_argument("--warmup", type=int, default=20, help="warm-up requests per size and mode")
    p.add_argument(
        "--max-load-minutes",
        type=float,
        default=MAX_LOAD_MINUTES,
        help="skip a size whose extrapolated load time exceeds this",
    )
    p.add_argument(
        "--redis-url",
        default=None,
        help="use this Redis (default GAAMA_REDIS_URL, else an embedded stack)",
    )
    p.add_argument("--kafka-bootstrap", default=None, help=argparse.SUPPRESS)  # not needed here
    p.add_argument("--json", default="bench-results/query.json", metavar="PATH")
    p.add_argument(
        "--write-docs", action="store_true", help="update the query section of docs/performance.md"
    )
    p.add_argument("--docs", default="docs/performance.md", help=argparse.SUPPRESS)
    p.add_argument(
        "--backends",
        default=backends.DEFAULT,
        help="embedding backends, one service run each, e.g. onnx,torch (default onnx; targets "
        "are read from the first)",
    )
    p.add_argument(
        "--redis-cluster",
        type=int,
        default=1,
        metavar="N",
        help="N > 1: the same tenants in one Redis and in an N-primary Redis Cluster, both "
        "embedded, latency per mode side by side (benchmarks/query_cluster.py)",
    )
    p.add_argument(
        "--tenants",
        type=int,
        default=6,
        help="with --redis-cluster: tenants of the first --sizes size each (default 6)",
    )
    p.add_argument("--keep", action="store_true", help="keep the loaded tenants and index")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_cli)
