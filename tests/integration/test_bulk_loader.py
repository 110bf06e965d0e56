"""BulkLoader (gaama.store.bulk) against the real Redis: a batch lands as the per-message write
path stores it, and the whole-tenant reads and the namespace clean-up see what was written."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis

from gaama import ids
from gaama.errors import ValidationError
from gaama.model import Edge, EdgeKind, Node, NodeKind
from gaama.store.bulk import BulkLoader
from gaama.store.graph import GraphStore
from gaama.store.keys import Keys

pytestmark = pytest.mark.requires_stack
TENANT = "acme"


def _graph(tenant: str = TENANT) -> tuple[list[Node], list[np.ndarray], list[Edge]]:
    """Three turns of one conversation, two facts, a concept and a reflection, every edge kind
    the pipeline writes; vectors apart from the nodes, as a loader holds them."""
    rng = np.random.default_rng(7)
    eps = [
        Node(
            id=ids.episode_id(tenant, "c1", str(i)),
            tenant=tenant,
            kind=NodeKind.EPISODE,
            text=f"turn {i}",
            conversation="c1",
            turn_id=str(i),
            speaker="Ann",
            time=1_700_000_000.0 + i,
        )
        for i in range(3)
    ]
    facts = [
        Node(id=ids.fact_id(tenant, t), tenant=tenant, kind=NodeKind.FACT, text=t, subject="Ann")
        for t in ("Ann has a puppy", "Ann lives in Oslo")
    ]
    concept = Node(
        id=ids.concept_id(tenant, "pets"), tenant=tenant, kind=NodeKind.CONCEPT, text="pets"
    )
    refl = Node(
        id=ids.reflection_id(tenant, "Ann likes animals"),
        tenant=tenant,
        kind=NodeKind.REFLECTION,
        text="Ann likes animals",
        extra={"sources": "x"},
    )
    nodes = [*eps, *facts, concept, refl]
    vectors = [rng.standard_normal(8).astype(np.float32) for _ in nodes]
    edges = [
        Edge(eps[0].id, eps[1].id, EdgeKind.NEXT, 0.5),
        Edge(eps[1].id, eps[2].id, EdgeKind.NEXT, 0.5),
        Edge(facts[0].id, eps[1].id, EdgeKind.DERIVED_FROM),
        Edge(facts[1].id, eps[2].id, EdgeKind.DERIVED_FROM),
        Edge(eps[1].id, concept.id, EdgeKind.HAS_CONCEPT, 0.7),
        Edge(facts[0].id, concept.id, EdgeKind.ABOUT_CONCEPT),
        Edge(refl.id, facts[0].id, EdgeKind.DERIVED_FROM_FACT),
        Edge(refl.id, facts[1].id, EdgeKind.DERIVED_FROM_FACT),
    ]
    return nodes, vectors, edges


async def _dump(redis: aioredis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under ``prefix`` (the prefix cut off) with its value."""
    out: dict[str, Any] = {}
    async for key in redis.scan_iter(match=f"{prefix}:*", count=1000):
        kind = await redis.type(key)
        if kind == b"hash":
            value: Any = await redis.hgetall(key)
        elif kind == b"zset":
            value = await redis.zrange(key, 0, -1, withscores=True)
        else:
            value = (kind, await redis.dump(key))
        out[key.decode().removeprefix(prefix)] = value
    return out


async def test_batch_is_stored_as_the_per_message_writes_store_it(
    redis_client: aioredis.Redis, namespace: str
) -> None:
    nodes, vectors, edges = _graph()
    per_message = GraphStore(redis_client, Keys(f"{namespace}m"))
    with_vectors = [
        dataclasses.replace(n, vector=v.tolist()) for n, v in zip(nodes, vectors, strict=True)
    ]
    await per_message.write(TENANT, with_vectors, edges)

    bulk = BulkLoader(GraphStore(redis_client, Keys(f"{namespace}b")))
    chain = [("c1", n.id, i) for i, n in enumerate(nodes[:3])]
    await bulk.write_batch(TENANT, nodes, vectors, edges, chain)

    written = await _dump(redis_client, f"{namespace}b")
    chain_key = next(k for k in written if k.startswith(":chain:"))
    assert written.pop(chain_key) == [(n.id.encode(), float(i)) for i, n in enumerate(nodes[:3])]
    expected = await _dump(redis_client, f"{namespace}m")
    # Both replaced the tenant's text version (store/fulltext.py), each with a token of its own
    version = Keys("").text_version(TENANT)
    assert written.pop(version)[0] == expected.pop(version)[0] == b"string"
    assert written == expected
    assert any(k.startswith(":deg:") for k in written)  # the degree index came along
    assert await bulk.graph.chain(TENANT, "c1") == [n.id for n in nodes[:3]]
    got = await bulk.graph.vectors(TENANT, [n.id for n in nodes], 8)
    assert np.array_equal(got, np.stack(vectors).astype(np.float16).astype(np.float32))


async def test_reads_and_clean_up(redis_client: aioredis.Redis, namespace: str) -> None:
    nodes, vectors, edges = _graph()
    other = _graph("other")
    bulk = BulkLoader(GraphStore(redis_client, Keys(namespace)))
    await bulk.write_batch(
        TENANT, nodes, vectors, edges, [("c1", n.id, i) for i, n in enumerate(nodes[:3])]
    )
    await bulk.write_batch("other", *other)
    assert await bulk.chain_lengths([(TENANT, "c1"), ("other", "c1"), (TENANT, "nope")]) == [
        3,
        0,
        0,
    ]
    assert await bulk.edge_counts(TENANT) == {
        "NEXT": 2,
        "DERIVED_FROM": 2,
        "HAS_CONCEPT": 1,
        "ABOUT_CONCEPT": 1,
        "DERIVED_FROM_FACT": 2,
    }
    # Another prefix on the same server is left alone.
    bystander = BulkLoader(GraphStore(redis_client, Keys(f"{namespace}x")))
    await bystander.write_batch(TENANT, nodes[:1], vectors[:1])
    assert await bulk.delete_namespace() > 0
    assert not [k async for k in redis_client.scan_iter(match=f"{namespace}:*")]
    assert await bystander.graph.exists(TENANT, nodes[0].id)
    await bystander.delete_namespace()


async def test_rejects_a_batch_that_does_not_fit(
    redis_client: aioredis.Redis, namespace: str
) -> None:
    nodes, vectors, _ = _graph()
    bulk = BulkLoader(GraphStore(redis_client, Keys(namespace)))
    with pytest.raises(ValidationError, match="vectors"):
        await bulk.write_batch(TENANT, nodes, vectors[:-1])
    with pytest.raises(ValidationError, match="tenant"):
        await bulk.write_batch("other", nodes, vectors)
    backwards = Edge(nodes[3].id, nodes[0].id, EdgeKind.NEXT)
    with pytest.raises(ValidationError, match="NEXT"):
        await bulk.write_batch(TENANT, nodes, vectors, [backwards])
    assert not [k async for k in redis_client.scan_iter(match=f"{namespace}:*")]
