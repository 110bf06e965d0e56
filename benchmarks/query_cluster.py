"""``python -m benchmarks query --redis-cluster N``: query latency on an N-primary Redis Cluster
against one Redis server, in the same run.

Two embedded Redis setups are started side by side (one server; N cluster-enabled primaries), the
same synthetic tenants are loaded into each (``--tenants`` tenants of the first ``--sizes``
size), and one query service runs against each (``GAAMA_REDIS_CLUSTER`` set for the cluster's).
Requests go to the two services in interleaved rounds (single, cluster, cluster, single, …),
each mode asking the same texts of the same tenants in the same order, one at a time, so drift
of a shared machine falls on both alike and the ratio of their p50 is the figure to read. The
spread of the tenants over the primaries (which primary holds each tenant's slot) is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import backends
from benchmarks.query import (
    QUOTAS_OFF,
    ROUNDS,
    Observed,
    _ask,
    load_tenant,
    machine_info,
    percentile,
    write_section,
)
from benchmarks.synthetic import query_texts
from gaama.config import ApiKey, hash_api_key, load_settings
from gaama.launch import ServiceProcess
from gaama.store import cluster, connect
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex

if TYPE_CHECKING:
    from benchmarks.query import Options

DOCS_BEGIN, DOCS_END = "<!-- query-cluster:begin -->", "<!-- query-cluster:end -->"
SETUPS = ("single", "cluster")
TARGET_RATIO = 1.2


@contextlib.contextmanager
def _stacks(shards: int) -> Iterator[dict[str, str]]:
    """Redis URL of each setup: one server, and a cluster of ``shards`` primaries."""
    from gaama import devstack

    with tempfile.TemporaryDirectory(prefix="gaama-bench-cluster-") as d:
        single = devstack.start_stack(Path(d, "single"), devstack.free_port(), devstack.free_port())
        try:
            ports = [devstack.free_port() for _ in range(shards)]
            multi = devstack.start_stack(
                Path(d, "cluster"),
                ports[0],
                devstack.free_port(),
                redis_cluster=shards,
                cluster_ports=ports,
            )
            try:
                yield {"single": single.redis_url, "cluster": multi.redis_url}
            finally:
                multi.stop()
        finally:
            single.stop()


async def _load(
    setup: str, url: str, prefix: str, tenants: Sequence[str], nodes: int, progress: bool
) -> dict[str, Any]:
    """The tenants loaded into one setup (the same seed per tenant in both); the primary holding
    each tenant's slot on the cluster."""
    client = connect(url, cluster=setup == "cluster", socket_timeout=600)
    keys = Keys(prefix)
    try:
        index = VectorIndex(client, f"{prefix}-idx", 384, keys)
        await index.ensure()
        seconds = 0.0
        for i, tenant in enumerate(tenants):
            load = await load_tenant(client, keys, tenant, nodes, seed=i, progress=progress)
            seconds += load["seconds"]
        where = {}
        if setup == "cluster":
            await cluster.initialized(client)
            where = {t: cluster.owner(client, keys.degrees(t)).name for t in tenants}
        return {"seconds": round(seconds, 2), "where": where}
    finally:
        await client.aclose()


async def _measure(
    urls: dict[str, str],
    keys_of: dict[str, str],
    tenants: Sequence[str],
    modes: Sequence[str],
    requests: int,
    warmup: int,
) -> dict[tuple[str, str], Observed]:
    import httpx

    texts = query_texts(4096)
    seen = {(s, m): Observed() for s in SETUPS for m in modes}
    per_round = math.ceil(requests / ROUNDS)
    async with httpx.AsyncClient(timeout=60) as client:
        for setup in SETUPS:  # warm-up: model, connections, Redis caches
            for mode in modes:
                for i in range(warmup):
                    t = tenants[i % len(tenants)]
                    await _ask(client, urls[setup], keys_of[t], texts[i], mode, Observed())
        for r in range(ROUNDS):
            order = SETUPS if r % 2 == 0 else tuple(reversed(SETUPS))
            for setup in order:
                for mode in modes:
                    for i in range(r * per_round, (r + 1) * per_round):
                        t = tenants[i % len(tenants)]
                        text = texts[i % len(texts)]
                        await _ask(client, urls[setup], keys_of[t], text, mode, seen[setup, mode])
    return seen


async def _run(opts: Options, shards: int, tenants_n: int, urls: dict[str, str]) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    prefix = f"gbench{run_id}"
    nodes = opts.sizes[0]
    tenants = [f"bench-{i}" for i in range(tenants_n)]
    keys_of = {t: f"bench-key-{run_id}-{t}" for t in tenants}
    loads = {}
    for setup in SETUPS:
        loads[setup] = await _load(setup, urls[setup], prefix, tenants, nodes, opts.progress)
        print(f"# {setup}: loaded {tenants_n} x {nodes:,} nodes", file=sys.stderr)
    services: dict[str, ServiceProcess] = {}
    log_dir = Path(tempfile.mkdtemp(prefix="gaama-bench-query-cluster-"))
    try:
        for setup in SETUPS:
            settings = load_settings(
                redis_url=urls[setup],
                redis_cluster=setup == "cluster",
                key_prefix=prefix,
                index_name=f"{prefix}-idx",
                api_keys=[ApiKey(key_sha256=hash_api_key(keys_of[t]), tenant=t) for t in tenants],
            )
            env = {**backends.env(opts.backends[0]), **QUOTAS_OFF}
            services[setup] = await ServiceProcess(
                "query", settings, log_dir / setup, inherit=True, extra=env
            ).astart(180)
        requests = opts.requests or 200
        seen = await _measure(
            {s: p.url for s, p in services.items()},
            keys_of,
            tenants,
            opts.modes,
            requests,
            opts.warmup,
        )
    finally:
        for p in services.values():
            p.stop()
    runs: list[dict[str, Any]] = []
    for (setup, mode), obs in seen.items():
        lat = obs.latencies_ms
        runs.append(
            {
                "setup": setup,
                "mode": mode,
                "requests": len(lat),
                "errors": obs.errors,
                "p50_ms": round(percentile(lat, 50), 2),
                "p95_ms": round(percentile(lat, 95), 2),
                "stage_p50_ms": {s: round(percentile(v, 50), 3) for s, v in obs.stages.items()},
            }
        )
        print(
            f"# {setup:7s} {mode:8s} p50 {runs[-1]['p50_ms']:7.1f} ms  "
            f"p95 {runs[-1]['p95_ms']:7.1f} ms  errors {obs.errors}",
            file=sys.stderr,
        )
    ratios = {}
    for mode in opts.modes:
        one = next(r for r in runs if (r["setup"], r["mode"]) == ("single", mode))
        many = next(r for r in runs if (r["setup"], r["mode"]) == ("cluster", mode))
        ratios[mode] = round(many["p50_ms"] / one["p50_ms"], 3) if one["p50_ms"] else None
    spread = dict(sorted(Counter(loads["cluster"]["where"].values()).items()))
    return {
        "shards": shards,
        "tenants": tenants_n,
        "nodes_per_tenant": nodes,
        "runs": runs,
        "p50_ratio_cluster_to_single": ratios,
        "target": f"cluster p50 <= {TARGET_RATIO}x single",
        "holds": all(v is not None and v <= TARGET_RATIO for v in ratios.values()),
        "tenants_per_primary": spread,
        "machine": machine_info(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opts.command,
    }


def docs_section(doc: dict[str, Any]) -> str:
    lines = [
        "## Query latency on Redis Cluster",
        "",
        f"`{doc['command']}` ({doc['date']}): {doc['tenants']} tenants of "
        f"{doc['nodes_per_tenant']:,} nodes in one Redis and in a {doc['shards']}-primary Redis "
        f"Cluster, one query service each, concurrency 1, rounds interleaved.",
        "",
        "| mode | single p50 (ms) | cluster p50 (ms) | cluster / single "
        "| single p95 | cluster p95 | knn stage p50 single / cluster (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, ratio in doc["p50_ratio_cluster_to_single"].items():
        one = next(r for r in doc["runs"] if (r["setup"], r["mode"]) == ("single", mode))
        many = next(r for r in doc["runs"] if (r["setup"], r["mode"]) == ("cluster", mode))
        knn = f"{one['stage_p50_ms']['knn']} / {many['stage_p50_ms']['knn']}"
        lines.append(
            f"| {mode} | {one['p50_ms']} | {many['p50_ms']} | {ratio} | "
            f"{one['p95_ms']} | {many['p95_ms']} | {knn} |"
        )
    spread = ", ".join(f"{n}: {c}" for n, c in doc["tenants_per_primary"].items())
    lines += [
        "",
        f"Tenants per primary (the primary holding each tenant's slot): {spread}.",
        f"Target {doc['target']}: {'holds' if doc['holds'] else 'MISSED'}.",
        "",
        "The cluster's KNN stage reads the returned fields from the node hashes after the search"
        " (the Query Engine there loads none outside its index name's slot; docs/architecture.md,"
        ' "Redis Cluster"): one more round trip, to the same primary.',
    ]
    return "\n".join(lines)


def main(opts: Options, shards: int, tenants: int) -> dict[str, Any]:
    with _stacks(shards) as urls:
        doc = asyncio.run(_run(opts, shards, tenants, urls))
    if opts.json_path:
        path = opts.json_path.with_name("query-cluster.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if opts.docs:
        write_section(opts.docs, DOCS_BEGIN, DOCS_END, docs_section(doc))
    return doc
