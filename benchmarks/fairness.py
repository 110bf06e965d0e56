"""``python -m benchmarks fairness``: one tenant's burst against another tenant's latency.

On the embedded stack (or ``--redis-url``), two synthetic tenants are loaded and the query
service is started with the per-tenant quotas of the caller's environment, the defaults
otherwise (``GAAMA_TENANT_CONCURRENCY``, ``GAAMA_TENANT_RATE``, ``GAAMA_TENANT_BURST``).
Tenant B, a client process of its own, asks ``--requests`` searches one after another, first
alone (its solo p50), then while tenant A sends waves of ``--burst`` concurrent searches. The
run is repeated with the quotas off (``--no-compare`` skips it), to show what admission control
buys. Reported: B's p50/p95 solo and under the burst, their ratio (the target is ≤ 3), B's
errors (the target is none), A's answers by status (0: no answer). JSON in
``bench-results/fairness.json``; ``--write-docs`` updates the section in docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from benchmarks.query import load_tenant, machine_info, percentile, publish, servers
from benchmarks.synthetic import query_texts
from gaama.config import ApiKey, Settings, hash_api_key, load_settings
from gaama.launch import ServiceProcess
from gaama.store import connect
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex

if TYPE_CHECKING:
    from benchmarks import SubParsers

DOCS_BEGIN, DOCS_END = "<!-- fairness:begin -->", "<!-- fairness:end -->"
TARGET_RATIO = 3.0


async def _search(client: httpx.AsyncClient, key: str, text: str) -> tuple[int, float]:
    """The status (0: no answer — a reset or a timeout) and the latency."""
    t0 = time.perf_counter()
    try:
        r = await client.post(
            "/v1/search", json={"query": text}, headers={"Authorization": f"Bearer {key}"}
        )
    except httpx.HTTPError:
        return 0, (time.perf_counter() - t0) * 1000.0
    return r.status_code, (time.perf_counter() - t0) * 1000.0


async def _polite(client: httpx.AsyncClient, key: str, texts: list[str]) -> dict[str, Any]:
    codes: Counter[int] = Counter()
    ms: list[float] = []
    for text in texts:
        code, took = await _search(client, key, text)
        codes[code] += 1
        if code == 200:
            ms.append(took)
    return {
        "p50_ms": round(percentile(ms, 50), 1) if ms else None,
        "p95_ms": round(percentile(ms, 95), 1) if ms else None,
        "errors": sum(n for c, n in codes.items() if c != 200),
        "statuses": {str(c): n for c, n in sorted(codes.items())},
    }


def _polite_client(url: str, key: str, texts: list[str]) -> dict[str, Any]:
    """Tenant B's searches, one after another, from a process and connection of its own."""

    async def run() -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            for text in texts[-3:]:  # warm-up: the connection
                await _search(client, key, text)
            return await _polite(client, key, texts[:-3])

    return asyncio.run(run())


async def _measure(url: str, keys: dict[str, str], requests: int, burst: int) -> dict[str, Any]:
    # Tenant B is another client: a process of its own. Driving its requests from the event
    # loop that drives A's waves of concurrent requests would measure that loop's queue (A's
    # replies parsed before B's), not the service.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return await _measure_with(pool, url, keys, requests, burst)


async def _measure_with(
    pool: Any, url: str, keys: dict[str, str], requests: int, burst: int
) -> dict[str, Any]:
    texts = query_texts(4096)
    limits = httpx.Limits(max_connections=burst + 8, max_keepalive_connections=burst + 8)
    loop = asyncio.get_running_loop()

    async def polite_b(part: list[str]) -> dict[str, Any]:
        job = pool.apply_async(_polite_client, (url, keys["b"], part))
        result: dict[str, Any] = await loop.run_in_executor(None, job.get)
        return result

    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        for text in texts[:20]:  # warm-up: model, connections, caches
            await _search(client, keys["b"], text)
            await _search(client, keys["a"], text)
        await polite_b(texts[:3])  # the pool's process is up
        await asyncio.sleep(1.5)  # let the rate buckets refill
        solo = await polite_b(texts[100 : 100 + requests + 3])
        await asyncio.sleep(1.5)
        burst_codes: Counter[int] = Counter()
        done = asyncio.Event()

        async def waves() -> None:
            i = 1000
            while not done.is_set():
                results = await asyncio.gather(
                    *(_search(client, keys["a"], texts[(i + j) % len(texts)]) for j in range(burst))
                )
                i += burst
                burst_codes.update(code for code, _ in results)

        async def polite() -> dict[str, Any]:
            await asyncio.sleep(0.3)  # the burst is under way
            try:
                return await polite_b(texts[200 : 200 + requests + 3])
            finally:
                done.set()

        loud = asyncio.create_task(waves())
        during = await polite()
        await loud
    ratio = during["p50_ms"] / solo["p50_ms"] if during["p50_ms"] and solo["p50_ms"] else None
    return {
        "solo": solo,
        "during_burst": during,
        "p50_ratio": round(ratio, 2) if ratio else None,
        "burst_statuses": {str(c): n for c, n in sorted(burst_codes.items())},
    }


async def _run(opts: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    prefix = f"gfair{run_id}"
    keys = {"a": f"fair-a-{run_id}", "b": f"fair-b-{run_id}"}
    settings: Settings = load_settings(
        redis_url=redis_url,
        key_prefix=prefix,
        index_name=f"{prefix}-idx",
        api_keys=[
            ApiKey(key_sha256=hash_api_key(keys[t]), tenant=f"tenant-{t}") for t in ("a", "b")
        ],
    )
    client = connect(redis_url, cluster=settings.redis_cluster, socket_timeout=600)
    index = VectorIndex(client, settings.index_name, settings.embed_dim, Keys(prefix))
    await index.ensure()
    runs: dict[str, Any] = {}
    try:
        for seed, t in enumerate(("a", "b")):
            await load_tenant(client, Keys(prefix), f"tenant-{t}", opts.nodes, seed=seed + 1)
        variants: list[tuple[str, dict[str, str]]] = [("quotas", {})]
        if opts.compare:
            variants.append(
                ("no_quotas", {"GAAMA_TENANT_CONCURRENCY": "0", "GAAMA_TENANT_RATE": "0"})
            )
        quotas = {
            "GAAMA_TENANT_CONCURRENCY": str(settings.tenant_concurrency),
            "GAAMA_TENANT_RATE": str(settings.tenant_rate),
            "GAAMA_TENANT_BURST": str(settings.tenant_burst),
        }
        for name, env in variants:
            env = {**quotas, **env}
            log_dir = Path(tempfile.mkdtemp(prefix="gaama-bench-fair-"))
            svc = await ServiceProcess("query", settings, log_dir, extra=env).astart(180)
            try:
                runs[name] = await _measure(svc.url, keys, opts.requests, opts.burst)
            finally:
                svc.stop()
            print(f"# {name}: {json.dumps(runs[name])}", file=sys.stderr)
    finally:
        if not opts.keep:
            await index.drop()
        await client.aclose()
    q = runs["quotas"]
    return {
        "machine": machine_info(),
        "nodes_per_tenant": opts.nodes,
        "burst": opts.burst,
        "requests": opts.requests,
        "defaults": {
            "tenant_concurrency": settings.tenant_concurrency,
            "tenant_rate": settings.tenant_rate,
            "tenant_burst": settings.tenant_burst,
        },
        "runs": runs,
        "targets": {
            "other_tenant_errors_0": q["during_burst"]["errors"] == 0,
            "p50_ratio_le_3": q["p50_ratio"] is not None and q["p50_ratio"] <= TARGET_RATIO,
        },
    }


def docs_section(doc: dict[str, Any]) -> str:
    lines = [
        "## Per-tenant fairness",
        "",
        f"`python -m benchmarks fairness` ({doc['machine'].get('cpus', '?')} CPUs): two tenants "
        f"of {doc['nodes_per_tenant']:,} synthetic nodes; tenant B asks {doc['requests']} "
        f"searches one after another, alone and then while tenant A sends waves of "
        f"{doc['burst']} concurrent searches. Default quotas: "
        f"{doc['defaults']['tenant_concurrency']} in flight, {doc['defaults']['tenant_rate']:g}/s "
        f"(burst {doc['defaults']['tenant_burst']}) per tenant.",
        "",
        "| quotas | B p50 solo (ms) | B p50 during burst (ms) | ratio | B p95 during (ms) "
        "| B errors | A's answers |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in doc["runs"].items():
        a = ", ".join(f"{n}× {c}" for c, n in r["burst_statuses"].items())
        lines.append(
            f"| {'on (defaults)' if name == 'quotas' else 'off'} | {r['solo']['p50_ms']} "
            f"| {r['during_burst']['p50_ms']} | {r['p50_ratio']} | {r['during_burst']['p95_ms']} "
            f"| {r['during_burst']['errors']} | {a} |"
        )
    t = doc["targets"]
    lines += [
        "",
        f"Targets: B sees no errors — "
        f"{'met' if t['other_tenant_errors_0'] else 'MISSED'}; B's p50 within 3× of solo — "
        f"{'met' if t['p50_ratio_le_3'] else 'MISSED'}.",
    ]
    return "\n".join(lines)


def _cli(args: argparse.Namespace) -> int:
    with servers(args.redis_url, None) as (redis_url, _):
        doc = asyncio.run(_run(args, redis_url))
    docs = Path(args.docs) if args.write_docs else None
    publish(doc, Path(args.json), docs_section(doc), docs, (DOCS_BEGIN, DOCS_END))
    return 0


def register(sub: SubParsers) -> None:
    """Add the ``fairness`` benchmark to the ``python -m benchmarks`` command."""
    p = sub.add_parser(
        "fairness",
        help="one tenant's burst of searches against another tenant's latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=5000, help="synthetic nodes per tenant")
    p.add_argument("--burst", type=int, default=150, help="tenant A's concurrent searches")
    p.add_argument("--requests", type=int, default=40, help="tenant B's searches per phase")
    p.add_argument("--no-compare", dest="compare", action="store_false", help="quotas on only")
    p.add_argument("--redis-url", default=None, help="use this Redis (default: embedded stack)")
    p.add_argument("--json", default="bench-results/fairness.json", metavar="PATH")
    p.add_argument("--write-docs", action="store_true", help="update docs/performance.md")
    p.add_argument("--docs", default="docs/performance.md", help=argparse.SUPPRESS)
    p.add_argument("--keep", action="store_true", help="keep the loaded tenants and index")
    p.set_defaults(func=_cli)
