"""A tenant-filtered KNN runs the hybrid policy chosen from the tenant's size: through HNSW for a
tenant the graph store knows as large, by brute force for a small one (the engine reports what
it ran), and both find the tenant's nearest nodes and only its own."""

from __future__ import annotations

import numpy as np
import pytest
import redis.asyncio as aioredis

from gaama import ids
from gaama.model import Node, NodeKind
from gaama.retrieval.scoring import cosine
from gaama.store.codecs import VECTOR_FIELD
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys
from gaama.store.vectors import VectorIndex

pytestmark = pytest.mark.requires_stack

LARGE = 200_000  # degree-index entries of the large tenant: far above where HNSW is cheaper


async def _last_search_mode(redis: aioredis.Redis, index: VectorIndex) -> str:
    info = await redis.execute_command("FT.DEBUG", "VECSIM_INFO", index.name, VECTOR_FIELD)
    flat = dict(zip(info[::2], info[1::2], strict=False))
    return str(flat[b"LAST_SEARCH_MODE"].decode())


@pytest.mark.single_redis  # FT.DEBUG VECSIM_INFO names the index: a cluster routes it by slot
async def test_large_tenants_walk_hnsw_small_ones_are_brute_forced(
    graph: GraphStore, index: VectorIndex, redis_client: aioredis.Redis, keys: Keys
) -> None:
    rng = np.random.default_rng(21)
    vectors: dict[str, dict[str, np.ndarray]] = {}
    for tenant in ("large", "small"):
        nodes = []
        for i in range(40):
            v = rng.standard_normal(index.dim).astype(np.float32)
            node = Node(
                id=ids.node_id(tenant, NodeKind.FACT, f"f{i}"),
                tenant=tenant,
                kind=NodeKind.FACT,
                text=f"fact {i}",
                vector=v.tolist(),
            )
            nodes.append(node)
            vectors.setdefault(tenant, {})[node.id] = v
        await graph.write(tenant, nodes, [])
    # The large tenant as the store knows it: its degree index holds LARGE nodes.
    for start in range(0, LARGE, 20_000):
        entries = {f"n{i}": 1 for i in range(start, start + 20_000)}
        await redis_client.hset(keys.degrees("large"), mapping=entries)  # type: ignore[arg-type]
    query = rng.standard_normal(index.dim).astype(np.float32)
    for tenant, mode in (("large", "HYBRID_BATCHES"), ("small", "HYBRID_ADHOC_BF")):
        hits = await index.knn(tenant, query, 10)
        assert await _last_search_mode(redis_client, index) == mode
        mine = vectors[tenant]
        exact = cosine(np.stack(list(mine.values())), query)
        want = [list(mine)[i] for i in np.argsort(-exact)[:10]]
        assert [h.id for h in hits] == want  # only its own nodes, nearest first
        # a narrower filter leaves the choice to the engine, and still finds the same nodes
        scoped = await index.knn(tenant, query, 10, kinds=[NodeKind.FACT])
        assert [h.id for h in scoped] == want
