"""Where a node's Redis bytes go, per kind of key: a synthetic tenant (``benchmarks.synthetic``, as
``python -m benchmarks query`` loads it) on a Redis of its own, then ``MEMORY USAGE`` of every
key of the tenant, summed per kind of key and divided by the nodes (and a node hash's bytes by
the node's kind).

    PYTHONPATH=shared:. python scripts/redis-bytes-split.py [nodes]

Printed twice: as this version writes the tenant, and after rewriting the same keys in the
forms before the fourth pass of issue 18 (adjacency values ``KIND|o|w``, each episode's ``raw``
field, chains as skiplists under Redis's default ``zset-max-listpack-entries`` of 128) — the
same data in both, so the difference is the layouts'. The Query Engine's and the HNSW graph's
memory is in no key (``FT.INFO``); the query benchmark's ``used_memory`` delta holds everything.

Then the expansion of a search (:meth:`GraphStore.expand`: 40 seeds, 2 hops, at most 300 nodes,
the default settings), timed over the same seed sets in each layout, in the order this version,
older forms, older forms, this version (``gaama migrate graph`` brings the letters back): the
Lua script parses every adjacency value it reads.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter

import numpy as np
import redis.asyncio as aioredis

from benchmarks.query import load_tenant
from gaama.config import RetrievalSettings
from gaama.devstack import processes
from gaama.model import EDGE_TYPE_WEIGHTS
from gaama.store import connect
from gaama.store.codecs import as_text, parse_adjacency, said_in
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.migrate_graph import migrate_graph
from gaama.store.vectors import VectorIndex

TENANT = "split"


async def usage(redis: aioredis.Redis, keys: Keys, nodes: int) -> dict[str, float]:
    """Bytes per node of each kind of the tenant's keys (node hashes also per node kind)."""
    total: Counter[str] = Counter()
    per_kind: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for kind in ("node", "adj", "chain", "deg"):
        async for key in redis.scan_iter(match=f"{keys.prefix}:{kind}:*", count=1000):
            used = await redis.memory_usage(key, samples=0) or 0
            total[kind] += used
            if kind == "node":
                node_kind = as_text(await redis.hget(key, "kind"))
                per_kind[node_kind] += used
                count[node_kind] += 1
    out = {k: round(v / nodes, 1) for k, v in total.items()}
    out["all keys"] = round(sum(total.values()) / nodes, 1)
    # a node hash of each kind, on average (not per node of the tenant)
    return out | {f"one {k}": round(per_kind[k] / count[k], 1) for k in sorted(count)}


async def to_older_forms(r: aioredis.Redis, keys: Keys) -> None:
    """The same tenant in the forms before the fourth pass: letters back to ``KIND|o|w``, each
    episode's ``raw`` written back, chains made again under the default listpack limit."""
    async for key in r.scan_iter(match=f"{keys.adj_prefix(TENANT)}*", count=1000):
        flat = await r.hgetall(key)
        older = {}
        for nb, value in flat.items():
            n = parse_adjacency(value, "")
            older[nb] = f"{n.kind.value}|{'o' if n.outgoing else 'i'}|{n.weight:.6g}"
        await r.delete(key)
        await r.hset(key, mapping=older)
    async for key in r.scan_iter(match=f"{keys.prefix}:node:*", count=1000):
        kind, text, speaker, raw = await r.hmget(key, ["kind", "text", "speaker", "raw"])
        if kind == b"episode" and raw is None:
            said = said_in(as_text(text), as_text(speaker))
            if said:
                await r.hset(key, "raw", said)
    await r.config_set("zset-max-listpack-entries", 128)
    async for key in r.scan_iter(match=f"{keys.prefix}:chain:*", count=1000):
        members: list[tuple[bytes, float]] = await r.zrange(key, 0, -1, withscores=True)
        await r.delete(key)
        await r.zadd(key, {m: score for m, score in members})


async def expansions(graph: GraphStore, seed_sets: list[list[str]]) -> float:
    """Median milliseconds of one expansion over ``seed_sets``."""
    p = RetrievalSettings()
    times = []
    for seeds in seed_sets:
        t = time.perf_counter()
        await graph.expand(
            TENANT,
            seeds,
            hops=p.hops,
            hub_degree=p.hub_degree,
            max_nodes=p.max_expanded,
            type_weights=EDGE_TYPE_WEIGHTS,
        )
        times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


async def split(url: str, nodes: int) -> None:
    client = connect(url, cluster=False, socket_timeout=600)
    keys = Keys("split")
    try:
        await VectorIndex(client, "split-idx", 384, keys).ensure()
        load = await load_tenant(client, keys, TENANT, nodes, seed=nodes, progress=False)
        print(f"# {nodes:,} nodes; used_memory delta while loading {load['bytes'] / nodes:.0f}")
        graph = GraphStore(client, keys)
        ids = [
            keys.id_from_node_key(as_text(k))
            async for k in client.scan_iter(match=keys.node(TENANT, "*"), count=1000)
        ]
        rng = np.random.default_rng(0)
        seed_sets = [list(rng.choice(ids, 40, replace=False)) for _ in range(300)]
        ms = [await expansions(graph, seed_sets)]
        now = await usage(client, keys, nodes)
        await to_older_forms(client, keys)
        before = await usage(client, keys, nodes)
        ms += [await expansions(graph, seed_sets), await expansions(graph, seed_sets)]
        await migrate_graph(client, keys)
        ms.append(await expansions(graph, seed_sets))
        print(f"{'key kind':<14} {'this version':>14} {'older forms':>12} {'difference':>11}")
        for k in now:
            print(f"{k:<14} {now[k]:>14,.1f} {before[k]:>12,.1f} {before[k] - now[k]:>11,.1f}")
        print(
            f"expansion p50 ms (this version, older, older, this version): "
            f"{', '.join(f'{m:.3f}' for m in ms)}"
        )
    finally:
        await client.aclose()


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    with processes.temporary_redis("gaama-bytes-") as url:
        asyncio.run(split(url, nodes))


if __name__ == "__main__":
    main()
